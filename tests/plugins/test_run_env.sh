#!/usr/bin/env bash
# test_run_env.sh — the environment `ftc run` gives its ranks (torchrun's
# variables and ftc's own), read by a probe binary (envprobe_main) that
# prints them and exits 0; real supervisors, agents and embedded Redis.
#
#   1. --simulate-nodes 2 --nproc-per-node 2: RANK 0..3 once each, each node
#      two ranks with LOCAL_RANK 0, 1 and one GROUP_RANK G (its position in
#      the generation, rendezvous order), RANK = 2G + LOCAL_RANK;
#      FTC_NODE_RANK the node's stable index (its agent's socket);
#      WORLD_SIZE 4, LOCAL_WORLD_SIZE 2, FTC_RANK = RANK,
#      FTC_WORLD_SIZE = 4, FTC_JOB_ID the job, one FTC_GENERATION and one
#      MASTER_ADDR:MASTER_PORT for all; TORCHELASTIC_RESTART_COUNT 0;
#      FTC_AGENT_SOCKET an existing socket, one per node; FTC_REDIS_URL
#      without the password, which is in FTC_REDIS_PASSWORD_FILE (mode 0600,
#      JOB_DIR/redis.password; before, no such file was ever written);
#      the per-generation variables FTC_RESTORE_RANK, FTC_PREV_WORLD_SIZE,
#      FTC_ASSIGN_FILE, FTC_ASSIGN_TIMEOUT_MS and FTC_TRAIN_RDZV_DIR, set
#      in ftc run's own environment, reach no rank of a fresh layout
#      (before, they were passed on: a fresh rank restored rank 7's state),
#      nor do FTC_CKPT_DIR (without --ckpt-dir) and TORCHELASTIC_ERROR_FILE;
#      TORCHELASTIC_USE_AGENT_STORE is False (a stale True was passed on);
#   2. Slurm: no --nnodes / --node-rank, SLURM_NNODES=1 SLURM_NODEID=0 and
#      --nproc-per-node 3: a job of one node, WORLD_SIZE 3;
#   3. Slurm, two `ftc run` processes of one job (SLURM_NNODES=2,
#      SLURM_NODEID 0 and 1): WORLD_SIZE 2, FTC_NODE_RANK = SLURM_NODEID;
#   4. SIGPIPE: a rank (a bash script) runs `yes | head -n1` and gets the
#      default disposition, as under a shell or torchrun: `yes` dies of
#      SIGPIPE (status 141), and SIGPIPE is not in the rank's SigIgn (before,
#      `ftc run`'s own SIG_IGN was inherited through exec: `yes` failed with
#      "Broken pipe", status 1, and a writer that ignores write errors, such
#      as `while :; do echo; done | head -n1`, never ended);
#   5. the Redis password reaches a rank only as the supervisor's
#      FTC_REDIS_PASSWORD_FILE, the password of the job's Redis: a rank (a
#      script) runs `ftc status`, a Redis client reading FTC_REDIS_URL,
#      (a) with a stale FTC_REDIS_PASSWORD and FTC_REDIS_PASSWORD_FILE in
#      `ftc run`'s environment, on the embedded Redis: it connects, and sees
#      neither (before, FTC_REDIS_PASSWORD was passed on and won over the
#      file: WRONGPASS); (b) the job launched again with the same job
#      directory on a Redis without a password: it connects, and gets no
#      FTC_REDIS_PASSWORD_FILE (before, JOB_DIR/redis.password, left by (a),
#      was named: its AUTH failed);
#   6. `ftc run` started with stdin and stderr closed (<&- 2>&-): each
#      rank's fd 0 and 2 are /dev/null (before, they were whatever the
#      supervisor had opened on those numbers, sockets to Redis or its
#      agent: a rank's error output went into them).
#
# usage: test_run_env.sh PATH/TO/ftc PATH/TO/envprobe_main
set -u
FTC=${1:?usage: test_run_env.sh FTC ENVPROBE}
PROBE=${2:?usage: test_run_env.sh FTC ENVPROBE}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/runenv-XXXXXX")
tag=$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf /dev/shm/ftc.env"$tag"* 2>/dev/null
    [ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # check, count
# the node index must come from the options or Slurm's variables only
unset FTC_NODE_RANK NODE_RANK SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_NODEID
export FTC_LOG_LEVEL=${FTC_LOG_LEVEL:-info}
# FTC_RUN_ONLY=3 runs scenario 3 only (while debugging)
want() { case ${FTC_RUN_ONLY:-123456} in *$1*) return 0 ;; esac; return 1; }

# v FILE RANK NAME: variable NAME as rank RANK saw it
v() { sed -n "s/^PROBE RANK=$2 .*\b$3=\([^ ]*\).*/\1/p" "$1" | head -1; }
# all FILE NAME: the distinct values of NAME over every rank, space-separated
all() { grep '^PROBE ' "$1" | sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" | sort -u | tr '\n' ' ' | sed 's/ $//'; }

# ---- 1. two simulated nodes, two ranks each ----------------------------------------------
if want 1; then
J1=env${tag}a
FTC_RESTORE_RANK=7 FTC_PREV_WORLD_SIZE=9 FTC_ASSIGN_FILE=$T/nofile FTC_ASSIGN_TIMEOUT_MS=5 \
FTC_TRAIN_RDZV_DIR=$T/nodir FTC_CKPT_DIR=$T/nockpt TORCHELASTIC_ERROR_FILE=$T/err.json \
TORCHELASTIC_USE_AGENT_STORE=True \
timeout 120 "$FTC" run --simulate-nodes 2 --nproc-per-node 2 --job "$J1" --job-dir "$T/j1" \
    --settle-ms 300 -- "$PROBE" >"$T/1.out" 2>&1
rc=$?
f=$T/1.out
check "1: ftc run finished (exit $rc)" test $rc -eq 0
check "1: four probes ran ($(count '^PROBE ' "$f"))" test "$(count '^PROBE ' "$f")" -eq 4
check "1: RANK 0..3 once each" test "$(grep '^PROBE ' "$f" | sed 's/^PROBE RANK=\([0-9]*\) .*/\1/' | sort -n | tr '\n' ' ')" = "0 1 2 3 "
# GROUP_RANK is the node's position in the generation (rendezvous order),
# FTC_NODE_RANK its stable index (--node-rank; its agent's socket)
for r in 0 1 2 3; do
    g=$(v "$f" $r GROUP_RANK) nr=$(v "$f" $r FTC_NODE_RANK)
    check "1: rank $r: RANK = GROUP_RANK x 2 + LOCAL_RANK, FTC_RANK = RANK (group $g, local $(v "$f" $r LOCAL_RANK))" \
        test "$((g * 2 + $(v "$f" $r LOCAL_RANK)))/$(v "$f" $r FTC_RANK)" = "$r/$r"
    check "1: rank $r: the agent socket of node $nr, a socket ($(v "$f" $r FTC_AGENT_SOCKET))" \
        test "$(v "$f" $r FTC_AGENT_SOCKET)" = "$T/j1/agent.$nr.sock" -a "$(v "$f" $r SOCKET_OK)" = 1
done
for n in 0 1; do # each node: two ranks, LOCAL_RANK 0 and 1, one GROUP_RANK
    check "1: node $n: LOCAL_RANK 0 and 1, one GROUP_RANK" \
        test "$(grep "FTC_NODE_RANK=$n " "$f" | sed -n 's/.*LOCAL_RANK=\([0-9]*\) .*/\1/p' | sort | tr '\n' ' ')/$(grep "FTC_NODE_RANK=$n " "$f" | sed -n 's/.*GROUP_RANK=\([0-9]*\) .*/\1/p' | sort -u | wc -l)" = "0 1 /1"
done
check "1: GROUP_RANK 0 and 1 ($(all "$f" GROUP_RANK)), FTC_NODE_RANK 0 and 1 ($(all "$f" FTC_NODE_RANK))" \
    test "$(all "$f" GROUP_RANK)/$(all "$f" FTC_NODE_RANK)" = "0 1/0 1"
check "1: WORLD_SIZE and FTC_WORLD_SIZE 4, LOCAL_WORLD_SIZE 2 everywhere" \
    test "$(all "$f" WORLD_SIZE)/$(all "$f" FTC_WORLD_SIZE)/$(all "$f" LOCAL_WORLD_SIZE)" = "4/4/2"
check "1: FTC_JOB_ID is the job ($(all "$f" FTC_JOB_ID))" test "$(all "$f" FTC_JOB_ID)" = "$J1"
for n in FTC_RESTORE_RANK FTC_PREV_WORLD_SIZE FTC_ASSIGN_FILE FTC_ASSIGN_TIMEOUT_MS \
    FTC_TRAIN_RDZV_DIR FTC_CKPT_DIR TORCHELASTIC_ERROR_FILE; do
    check "1: $n of ftc run's own environment reaches no rank ($(all "$f" $n))" \
        test "$(all "$f" $n)" = "-"
done
check "1: one generation, a number ($(all "$f" FTC_GENERATION))" \
    bash -c "[[ '$(all "$f" FTC_GENERATION)' =~ ^[0-9]+$ ]]"
check "1: one MASTER_ADDR:MASTER_PORT ($(all "$f" MASTER_ADDR):$(all "$f" MASTER_PORT))" \
    bash -c "[[ '$(all "$f" MASTER_ADDR)' =~ ^[^\ ]+$ && '$(all "$f" MASTER_PORT)' =~ ^[1-9][0-9]*$ ]]"
check "1: TORCHELASTIC_RESTART_COUNT 0" test "$(all "$f" TORCHELASTIC_RESTART_COUNT)" = 0
# no agent store: a stale True made PyTorch's env:// rank 0 wait for a store nobody hosts
check "1: TORCHELASTIC_USE_AGENT_STORE False ($(all "$f" TORCHELASTIC_USE_AGENT_STORE))" \
    test "$(all "$f" TORCHELASTIC_USE_AGENT_STORE)" = False
# the Redis URL without its password, which is in a file only the ranks' user reads
pwf=$(all "$f" FTC_REDIS_PASSWORD_FILE)
check "1: FTC_REDIS_URL has no password ($(all "$f" FTC_REDIS_URL))" \
    bash -c "[[ '$(all "$f" FTC_REDIS_URL)' =~ ^redis://127.0.0.1:[0-9]+/0$ ]]"
check "1: FTC_REDIS_PASSWORD_FILE ($pwf): one file, mode 0600, readable ($(all "$f" PWFILE_OK))" \
    test "$pwf" = "$T/j1/redis.password" -a "$(all "$f" PWFILE_OK)" = 1
check "1: it holds the job's Redis password (the embedded Redis's requirepass)" \
    test -n "$(cat "$pwf" 2>/dev/null)" -a \
    "$(cat "$pwf" 2>/dev/null)" = "$(sed -n 's/^requirepass //p' "$T/j1/redis.conf")"
[ $fails -eq 0 ] || { echo "--- output of 1:"; tail -40 "$f"; }
fi

# ---- 2. Slurm, one node --------------------------------------------------------------------
if want 2; then
J2=env${tag}b
f0=$fails
SLURM_NNODES=1 SLURM_NODEID=0 timeout 120 "$FTC" run --nproc-per-node 3 --job "$J2" \
    --job-dir "$T/j2" --settle-ms 300 -- "$PROBE" >"$T/2.out" 2>&1
rc=$?
f=$T/2.out
check "2: ftc run under SLURM_NNODES=1 finished (exit $rc)" test $rc -eq 0
check "2: three probes, RANK 0..2" test "$(grep '^PROBE ' "$f" | sed 's/^PROBE RANK=\([0-9]*\) .*/\1/' | sort -n | tr '\n' ' ')" = "0 1 2 "
check "2: WORLD_SIZE 3 = nproc, GROUP_RANK 0 ($(all "$f" WORLD_SIZE), $(all "$f" GROUP_RANK))" \
    test "$(all "$f" WORLD_SIZE)/$(all "$f" GROUP_RANK)/$(all "$f" LOCAL_WORLD_SIZE)" = "3/0/3"
[ $fails -eq $f0 ] || { echo "--- output of 2:"; tail -40 "$f"; }
fi

# ---- 3. Slurm, two nodes: two `ftc run` of one job -------------------------------------------
if want 3; then
J3=env${tag}c
f0=$fails
for n in 0 1; do
    SLURM_NNODES=2 SLURM_NODEID=$n timeout 120 "$FTC" run --job "$J3" --job-dir "$T/j3" \
        --settle-ms 300 -- "$PROBE" >"$T/3.$n.out" 2>&1 &
    pids+=($!)
done
rc0=0 rc1=0
wait "${pids[0]}" || rc0=$?
wait "${pids[1]}" || rc1=$?
pids=()
cat "$T/3.0.out" "$T/3.1.out" >"$T/3.out"
f=$T/3.out
check "3: both nodes finished (exit $rc0, $rc1)" test $rc0 -eq 0 -a $rc1 -eq 0
check "3: two probes, RANK 0 and 1" test "$(grep '^PROBE ' "$f" | sed 's/^PROBE RANK=\([0-9]*\) .*/\1/' | sort -n | tr '\n' ' ')" = "0 1 "
check "3: WORLD_SIZE 2 everywhere ($(all "$f" WORLD_SIZE))" test "$(all "$f" WORLD_SIZE)" = 2
for n in 0 1; do
    check "3: SLURM_NODEID=$n: FTC_NODE_RANK $n, agent socket agent.$n.sock" \
        test "$(all "$T/3.$n.out" FTC_NODE_RANK)/$(all "$T/3.$n.out" FTC_AGENT_SOCKET)" = "$n/$T/j3/agent.$n.sock"
done
check "3: one generation, one MASTER_PORT" \
    test "$(all "$f" FTC_GENERATION | wc -w)/$(all "$f" MASTER_PORT | wc -w)" = "1/1"
[ $fails -eq $f0 ] || { echo "--- output of 3:"; tail -30 "$T/3.0.out"; tail -30 "$T/3.1.out"; }
fi

# ---- 4. SIGPIPE has its default disposition in the ranks -------------------------------------
if want 4; then
J4=env${tag}d
f0=$fails
cat >"$T/pipe.sh" <<'EOF2'
#!/usr/bin/env bash
yes | head -n1 >/dev/null
st=${PIPESTATUS[0]}
ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status)
echo "PIPE RANK=$RANK yes=$st sigign=$ign"
EOF2
chmod +x "$T/pipe.sh"
timeout 120 "$FTC" run --nproc-per-node 2 --job "$J4" --job-dir "$T/j4" --settle-ms 300 \
    -- "$T/pipe.sh" >"$T/4.out" 2>&1
rc=$?
f=$T/4.out
# pall NAME: the distinct values of NAME over the ranks' PIPE lines
pall() { grep '^PIPE ' "$f" | sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
check "4: ftc run finished (exit $rc)" test $rc -eq 0
check "4: two ranks reported ($(count '^PIPE ' "$f"))" test "$(count '^PIPE ' "$f")" -eq 2
check "4: \`yes | head -n1\` in a rank: yes died of SIGPIPE, 141 ($(pall yes))" \
    test "$(pall yes)" = 141
# SigIgn is a hex mask; SIGPIPE (13) is bit 12
ign=$(pall sigign)
check "4: SIGPIPE is not ignored in the ranks (SigIgn $ign)" \
    bash -c "[ -n '$ign' ] || exit 1; for m in $ign; do (( (0x\$m >> 12) & 1 )) && exit 1; done; exit 0"
check "4: no 'Broken pipe' from a rank" test "$(count 'Broken pipe' "$f")" -eq 0
[ $fails -eq $f0 ] || { echo "--- output of 4:"; tail -30 "$f"; }
fi

# ---- 5. the Redis password: the supervisor's file only ----------------------------------------
if want 5; then
J5=env${tag}e
f0=$fails
cat >"$T/rstat.sh" <<EOF2
#!/usr/bin/env bash
"$FTC" status --job "\$FTC_JOB_ID" >/dev/null 2>"$T/5.status.\$RANK"
rc=\$?
echo "RSTAT RANK=\$RANK rc=\$rc pw=\${FTC_REDIS_PASSWORD:--} pwfile=\${FTC_REDIS_PASSWORD_FILE:--}"
EOF2
chmod +x "$T/rstat.sh"
echo stale-file-password >"$T/stale.pw"
chmod 600 "$T/stale.pw"
# rall FILE NAME: the distinct values of NAME over the ranks' RSTAT lines
rall() { grep '^RSTAT ' "$1" | sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
FTC_REDIS_PASSWORD=stale-password FTC_REDIS_PASSWORD_FILE=$T/stale.pw \
timeout 120 "$FTC" run --nproc-per-node 2 --job "$J5" --job-dir "$T/j5" --settle-ms 300 \
    -- "$T/rstat.sh" >"$T/5a.out" 2>&1
rc=$?
f=$T/5a.out
check "5a: ftc run on the embedded Redis finished (exit $rc)" test $rc -eq 0
check "5a: two ranks reported ($(count '^RSTAT ' "$f"))" test "$(count '^RSTAT ' "$f")" -eq 2
check "5a: no rank got ftc run's FTC_REDIS_PASSWORD ($(rall "$f" pw))" test "$(rall "$f" pw)" = -
check "5a: the password file is the job's ($(rall "$f" pwfile))" \
    test "$(rall "$f" pwfile)" = "$T/j5/redis.password"
check "5a: the ranks' \`ftc status\` connected ($(rall "$f" rc): $(head -c 200 "$T/5.status.0"))" \
    test "$(rall "$f" rc)" = 0
# (b) a Redis without a password, the job directory of (a) (its redis.password stays)
rport=
for try in $(seq 20); do
    p=$((20000 + RANDOM % 30000))
    (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
        >"$T/5.redis.log" 2>&1 &
    rpid=$!
    pids+=($rpid)
    for i in $(seq 50); do (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break; sleep 0.1; done
    if kill -0 "$rpid" 2>/dev/null; then rport=$p; break; fi
done
check "5b: a redis-server without a password runs (port $rport)" test -n "$rport"
if [ -n "$rport" ]; then
    env -u FTC_REDIS_PASSWORD -u FTC_REDIS_PASSWORD_FILE \
    timeout 120 "$FTC" run --nproc-per-node 2 --job "$J5" --job-dir "$T/j5" --settle-ms 300 \
        --redis "redis://127.0.0.1:$rport/0" -- "$T/rstat.sh" >"$T/5b.out" 2>&1
    rc=$?
    f=$T/5b.out
    check "5b: ftc run on the Redis without a password finished (exit $rc)" test $rc -eq 0
    check "5b: two ranks reported ($(count '^RSTAT ' "$f"))" test "$(count '^RSTAT ' "$f")" -eq 2
    check "5b: no FTC_REDIS_PASSWORD_FILE: there is no password ($(rall "$f" pwfile))" \
        test "$(rall "$f" pwfile)" = -
    check "5b: the ranks' \`ftc status\` connected ($(rall "$f" rc): $(head -c 200 "$T/5.status.0"))" \
        test "$(rall "$f" rc)" = 0
    kill "$rpid" 2>/dev/null
    wait "$rpid" 2>/dev/null
fi
[ $fails -eq $f0 ] || { echo "--- output of 5:"; tail -30 "$T/5a.out"; tail -30 "$T/5b.out"; }
fi

# ---- 6. ftc run started with stdin and stderr closed ----------------------------------------
if want 6; then
J6=env${tag}f
f0=$fails
cat >"$T/fds.sh" <<'EOF2'
#!/bin/sh
in=$(readlink /proc/self/fd/0 || echo closed)
err=$(readlink /proc/self/fd/2 || echo closed)
echo "FDS RANK=$RANK in=$in err=$err"
EOF2
chmod +x "$T/fds.sh"
timeout 120 "$FTC" run --nproc-per-node 2 --job "$J6" --job-dir "$T/j6" --settle-ms 300 \
    -- "$T/fds.sh" >"$T/6.out" <&- 2>&-
rc=$?
f=$T/6.out
fall() { grep '^FDS ' "$f" | sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" | sort -u | tr '\n' ' ' |
    sed 's/ $//'; }
check "6: ftc run with stdin and stderr closed finished (exit $rc)" test $rc -eq 0
check "6: two ranks reported ($(count '^FDS ' "$f"))" test "$(count '^FDS ' "$f")" -eq 2
check "6: the ranks' stdin is /dev/null, no fd of the supervisor ($(fall in))" \
    test "$(fall in)" = /dev/null
check "6: the ranks' stderr is /dev/null, no fd of the supervisor ($(fall err))" \
    test "$(fall err)" = /dev/null
[ $fails -eq $f0 ] || { echo "--- output of 6:"; tail -30 "$f"; }
fi

if [ $fails -ne 0 ]; then
    echo "test_run_env: $fails check(s) failed"
    exit 1
fi
echo "test_run_env: all checks passed"
