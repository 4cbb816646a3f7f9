#!/usr/bin/env bash
# test_train_cli.sh — `ftc train` as a command (the tiny model, seconds):
#   1. --train-config FILE.json gives the same run as the same flags: the
#      same progress lines (loss, lr, norm), eval loss and parameter hash;
#      a size may be written "64KiB" as on the command line; a flag wins
#      over the file; an unknown key is a usage error naming it; --log-every 0
#      is a usage error (it divided by zero), so is --skip-steps "5," (an
#      empty entry); --eval-batches 0, --threads over 256 and --inject-rank
#      over 63 too (they were taken as 1, 256 and 65); a real number flag
#      (--lr ...), --guard or --skip-steps is parsed once, strictly (no " 1e-3",
#      "0x1p-3", "nan", a float's overflow) in its range; under --nproc, a bad
#      value is one error from the launcher, not one from each rank; a
#      --ckpt-dir of another configuration (or the other kind of
#      checkpoint) is a configuration error: exit 2, --nproc's launcher too,
#      which gives the other ranks the larger of --coll-timeout-ms and
#      --agent-call-timeout-ms, + 20 s, before it kills them;
#   2. the final evaluation line "eval loss X (N held-out sequences)" and
#      the parameter hash line are printed;
#   3. `ftc train --tokenize TEXT --data OUT` writes a token file (one token
#      per byte) that `ftc train --data OUT` trains on;
#   4. a rank whose MASTER_PORT, FTC_RDZV_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE,
#      FTC_GENERATION, WORLD_SIZE, RANK (also in --tp's check) or, in-process,
#      FTC_ASSIGN_TIMEOUT_MS is no whole number in range is a usage error
#      naming the variable, at once; so is a restarted rank's
#      FTC_PREV_WORLD_SIZE or FTC_RESTORE_RANK (from trainer creation, before
#      the agent is asked anything); --agent-call-timeout-ms bounds each call to
#      the agent (a mute one: FTC_ETIMEDOUT naming it), 0 is a usage error;
#   5. FTC_TRAIN_DIE_IN_CKPT (fault injection) that is not RANK:STEP in range
#      ("1:5x", "1", " 0:2") is a usage error naming it, before the run
#      (sscanf took "1:5x", and a typo made no fault, silently); a good one
#      still kills the rank right after that step's checkpoint;
#   6. a setting flag that ftc train does not read (--agent-timeout-ms,
#      --persist-keep) is a warning naming it, once, also under --nproc; job.id
#      (read) and a setting from the environment are not;
#   7. a plain SIGUSR1 to a rank under a launcher (Slurm's warning signal) is
#      logged and ignored (it killed the rank); only ftc run's queued request
#      (in-process) makes a rank leave;
#   8. --nproc: a fork that fails (RLIMIT_NPROC, as user nobody; skipped
#      unless root with setpriv and prlimit) is an error naming the rank,
#      and the ranks already started are given the same grace period, named
#      as after a rank's failure (before, nothing said why they were killed).
# usage: test_train_cli.sh PATH/TO/ftc
set -u
FTC=${1:?usage: test_train_cli.sh FTC}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/traincli-XXXXXX")
trap '[ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"' EXIT
fails=0
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
export OMP_WAIT_POLICY=passive
# the lines that must match between two runs: progress without tok/s, eval
# loss without tokens/s, the parameter hash
norm() { sed -n -e 's/ tok\/s [0-9.]*//p' -e 's/; [0-9.]* tokens\/s over the run//p' \
             -e '/^params xxh3/p' "$1" | grep -E '^(step|eval loss|params)'; }

FLAGS=(--model tiny --steps 6 --micro-batch 2 --seq-len 16 --lr 0.003 --warmup 2 --seed 7
       --eval-batches 2 --log-every 1 --corpus-bytes 64KiB)
cat >"$T/cfg.json" <<'JSON'
{"model": "tiny", "steps": 6, "micro_batch": 2, "seq_len": 16, "lr": 0.003, "warmup": 2,
 "seed": 7, "eval_batches": 2, "log_every": 1, "corpus_bytes": "64KiB"}
JSON
timeout 120 "$FTC" train "${FLAGS[@]}" >"$T/flags.out" 2>&1
rc=$?
check "flags run finished (exit $rc)" test $rc -eq 0
timeout 120 "$FTC" train --train-config "$T/cfg.json" >"$T/cfg.out" 2>&1
rc=$?
check "--train-config run finished (exit $rc)" test $rc -eq 0
norm "$T/flags.out" >"$T/flags.n"
norm "$T/cfg.out" >"$T/cfg.n"
check "both runs: 6 progress lines, an eval loss line, a params line" \
    test "$(grep -c '^step [0-9]*/6 loss' "$T/flags.n")/$(grep -c '^eval loss [0-9.]* (4 held-out sequences)$' "$T/flags.n")/$(grep -c '^params xxh3 [0-9a-f]* after 6 steps$' "$T/flags.n")" = "6/1/1"
check "--train-config gives the same run as the flags" cmp -s "$T/flags.n" "$T/cfg.n"
check "lr of step 1 is lr/warmup (1.500e-03)" grep -q '^step 1/6 loss [0-9.]* lr 1.500e-03' "$T/cfg.n"
# a flag wins over the file
timeout 120 "$FTC" train --train-config "$T/cfg.json" --lr 0.001 >"$T/win.out" 2>&1
check "a flag wins over the file (lr 0.001: step 1 at 5.000e-04)" \
    grep -q '^step 1/6 loss [0-9.]* tok/s [0-9.]* lr 5.000e-04' "$T/win.out"
echo '{"model": "tiny", "bogus_key": 1}' >"$T/bad.json"
"$FTC" train --train-config "$T/bad.json" >"$T/bad.out" 2>&1
rc=$?
check "an unknown key: usage error (exit $rc) naming it" \
    bash -c "[ $rc -eq 2 ] && grep -q \"unknown key 'bogus_key'\" '$T/bad.out'"
echo '{"corpus_bytes": "lots"}' >"$T/bad2.json"
"$FTC" train --train-config "$T/bad2.json" >"$T/bad2.out" 2>&1
rc=$?
check "a bad size: usage error (exit $rc) naming the key" \
    bash -c "[ $rc -eq 2 ] && grep -q \"'corpus_bytes' wants a size\" '$T/bad2.out'"
# a value that would divide by zero is a usage error, never a crash (SIGFPE)
timeout 120 "$FTC" train "${FLAGS[@]}" --steps 2 --log-every 0 >"$T/le0.out" 2>&1
rc=$?
check "--log-every 0: usage error (exit $rc) naming it" \
    bash -c "[ $rc -eq 2 ] && grep -q -- '--log-every' '$T/le0.out'"
# a bad value under --nproc is one usage error, from the launcher, before any rank starts
# (each of the N ranks printed it); values that were changed silently are errors
for a in "--eval-batches 0:1..100000" "--threads 300:0..256" "--inject-rank 64:0..63" \
    "--guard-window 1:2..256"; do
    flag=${a%:*} range=${a#*:}
    timeout 120 "$FTC" train "${FLAGS[@]}" --steps 2 --nproc 3 $flag >"$T/rng.out" 2>&1
    rc=$?
    n=$(grep -c -- "$flag: must be $range" "$T/rng.out")
    check "--nproc 3 $flag: one usage error (exit $rc, said $n times) naming it and $range" \
        test "$rc/$n" = "2/1"
done
# each flag given as text (a real number, --guard, --skip-steps) is parsed once, strictly,
# before --nproc launches anything: one usage error naming the flag, its value and what it
# must be (strtod took " 1e-3", "0x1p-3" and "1e39", a float's inf; --lr 0 or --grad-clip -1
# failed later, in each rank, without naming the flag)
while IFS='|' read -r flag val msg; do
    timeout 120 "$FTC" train "${FLAGS[@]}" --steps 2 --nproc 3 "$flag" "$val" >"$T/bad.out" 2>&1
    rc=$?
    n=$(grep -c -- "^ftc train: $msg" "$T/bad.out")
    r=$(grep -c '^step \|rank [0-9]' "$T/bad.out")
    check "--nproc 3 $flag '$val': one usage error (exit $rc, said $n times, $r rank lines)" \
        test "$rc/$n/$r" = "2/1/0"
done <<'EOF'
--lr|abc|--lr 'abc': not a decimal number .*it must be in (0, 10)$
--lr| 1e-3|--lr ' 1e-3': not a decimal number .*it must be in (0, 10)$
--lr|0x1p-3|--lr '0x1p-3': not a decimal number .*it must be in (0, 10)$
--lr|nan|--lr 'nan': not a decimal number .*it must be in (0, 10)$
--lr|1e-3x|--lr '1e-3x': not a decimal number .*it must be in (0, 10)$
--lr|0|--lr 0: must be in (0, 10)$
--lr|10|--lr 10: must be in (0, 10)$
--min-lr-ratio|1.5|--min-lr-ratio 1.5: must be in \[0, 1\]$
--weight-decay|-0.1|--weight-decay -0.1: must be >= 0$
--grad-clip|1e39|--grad-clip 1e39: too large for a float; it must be >= 0$
--guard-spike-sigma|inf|--guard-spike-sigma 'inf': not a decimal number .*it must be >= 0$
--guard|maybe|--guard 'maybe': must be skip, rollback or off$
--skip-steps|5,,9|--skip-steps: skip list '5,,9': .* is not a step index
EOF
# good values in every form the parser takes still run (a sign, no leading digit, an exponent)
timeout 120 "$FTC" train "${FLAGS[@]}" --steps 2 --lr +.003 --min-lr-ratio 1 --weight-decay 0 \
    --grad-clip 1E0 --guard-spike-sigma 6.0 --guard rollback --skip-steps 1 >"$T/good.out" 2>&1
rc=$?
check "good values in every form: the run finishes (exit $rc)" test $rc -eq 0
# an empty entry of --skip-steps is a usage error, never silently dropped
timeout 120 "$FTC" train "${FLAGS[@]}" --steps 2 --skip-steps "5," >"$T/skip.out" 2>&1
rc=$?
check "--skip-steps '5,': usage error (exit $rc) naming the empty entry" \
    bash -c "[ $rc -eq 2 ] && grep -q 'empty entry' '$T/skip.out'"
# a --ckpt-dir written by a different configuration: exit 2 (a configuration
# error, FTC_ECONFIG), the message naming it
timeout 120 "$FTC" train "${FLAGS[@]}" --global-batch 4 --steps 2 --ckpt-dir "$T/ck" --ckpt-every 1 >"$T/ck1.out" 2>&1
rc=$?
check "a checkpointed run finished (exit $rc)" test $rc -eq 0
timeout 120 "$FTC" train "${FLAGS[@]}" --global-batch 4 --steps 4 --seed 8 --ckpt-dir "$T/ck" >"$T/ck2.out" 2>&1
rc=$?
check "another configuration on that --ckpt-dir: exit 2 (got $rc), 'different configuration'" \
    bash -c "[ $rc -eq 2 ] && grep -q 'different configuration' '$T/ck2.out'"
timeout 120 "$FTC" train "${FLAGS[@]}" --global-batch 4 --steps 4 --nproc 2 --ckpt-dir "$T/ck" >"$T/ck3.out" 2>&1
rc=$?
check "--nproc 2 on a single-process --ckpt-dir: the launcher exits 2 (got $rc)" \
    bash -c "[ $rc -eq 2 ] && grep -q 'single-process state' '$T/ck3.out'"
# the launcher gives the surviving ranks the larger of the collective and the agent call
# deadlines (+ 20 s) before it kills them: it took the collective deadline only, and killed a
# rank still waiting on its agent
timeout 120 "$FTC" train "${FLAGS[@]}" --global-batch 4 --steps 4 --nproc 2 --ckpt-dir "$T/ck" \
    --coll-timeout-ms 5000 --agent-call-timeout-ms 90000 >"$T/ck4.out" 2>&1
rc=$?
check "--nproc 2, --agent-call-timeout-ms 90000 > --coll-timeout-ms 5000: exit $rc, 110000 ms" \
    bash -c "[ $rc -eq 2 ] && grep -q 'other ranks get 110000 ms to end' '$T/ck4.out'"
[ $rc -eq 2 ] && grep -q 'other ranks get 110000 ms to end' "$T/ck4.out" || cat "$T/ck4.out"
[ $fails -eq 0 ] || { echo "--- flags:"; cat "$T/flags.out"; echo "--- config:"; cat "$T/cfg.out"; }

# ---- the tokenizer -------------------------------------------------------------------------
f0=$fails
for i in $(seq 400); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$T/text.txt"
bytes=$(wc -c <"$T/text.txt")
"$FTC" train --tokenize "$T/text.txt" --data "$T/tok.bin" >"$T/tok.out" 2>&1
rc=$?
check "--tokenize finished (exit $rc)" test $rc -eq 0
check "--tokenize: one token per byte ($bytes)" grep -q "tokenized .*: $bytes tokens (bytes, vocab 256)" "$T/tok.out"
timeout 120 "$FTC" train --model tiny --data "$T/tok.bin" --steps 3 --micro-batch 2 --seq-len 16 \
    --eval-batches 2 --log-every 1 >"$T/data.out" 2>&1
rc=$?
check "ftc train --data on the token file (exit $rc)" test $rc -eq 0
check "it trained 3 steps and evaluated" \
    bash -c "grep -q '^step 3/3 loss' '$T/data.out' && grep -q '^eval loss [0-9.]* (4 held-out sequences)' '$T/data.out'"
[ $fails -eq $f0 ] || { cat "$T/tok.out" "$T/data.out"; }

# ---- the launch environment, strictly ------------------------------------------------------
# a rank under a launcher (RANK, WORLD_SIZE, MASTER_ADDR; no directory): an integer variable
# that is not one is a usage error naming it, at once (atoi made "12abc" port 12 and "abc"
# local rank 0, and the rank then waited for a rendezvous that could never form)
XFLAGS=() # more flags of envcase's run
envcase() { # envcase NAME VAR=VALUE...: exit 2 naming NAME and its value (NAME='VALUE')
    local name=$1
    shift
    env -u FTC_TRAIN_RDZV_DIR RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$@" \
        timeout 20 "$FTC" train "${FLAGS[@]}" --backend cpu --coll cpu --coll-timeout-ms 2000 \
        "${XFLAGS[@]}" >"$T/env.out" 2>&1
    local rc=$?
    local said=no
    grep -qF -- "$name='" "$T/env.out" && said=yes
    check "$* ${XFLAGS[*]}: usage error (exit $rc) naming $name (said: $said)" \
        test "$rc/$said" = "2/yes"
    [ "$rc/$said" = "2/yes" ] || cat "$T/env.out"
}
envcase MASTER_PORT MASTER_PORT=12abc
envcase MASTER_PORT MASTER_PORT=-5
envcase MASTER_PORT MASTER_PORT=70000
envcase MASTER_PORT MASTER_PORT=65535 TORCHELASTIC_USE_AGENT_STORE=True
envcase FTC_RDZV_PORT FTC_RDZV_PORT=1x
envcase LOCAL_RANK LOCAL_RANK=abc
envcase LOCAL_RANK LOCAL_WORLD_SIZE=2 LOCAL_RANK=2
envcase LOCAL_WORLD_SIZE LOCAL_WORLD_SIZE=0
envcase FTC_GENERATION FTC_GENERATION=7q
envcase FTC_GENERATION FTC_GENERATION=-1
# WORLD_SIZE and RANK themselves: strtol took " 1" (the rank then waited for a rendezvous), the
# --tp check's strtoull took "2x" for 2 and "abc" for 0 (a complaint about --tp, naming no
# variable)
envcase RANK "RANK= 1"
envcase RANK RANK=1x
envcase RANK RANK=2
envcase WORLD_SIZE "WORLD_SIZE= 2"
envcase WORLD_SIZE WORLD_SIZE=65
XFLAGS=(--tp 2)
envcase WORLD_SIZE WORLD_SIZE=2x
envcase WORLD_SIZE WORLD_SIZE=abc
XFLAGS=()
# in-process (FTC_ASSIGN_FILE): the wait for the next assignment, read at the start; it fell
# back to 10 minutes on garbage, found only once a generation had failed
envcase FTC_ASSIGN_TIMEOUT_MS RANK=0 WORLD_SIZE=1 FTC_ASSIGN_FILE="$T/assign.n0.0" \
    FTC_ASSIGN_TIMEOUT_MS=10s
envcase FTC_ASSIGN_TIMEOUT_MS RANK=0 WORLD_SIZE=1 FTC_ASSIGN_FILE="$T/assign.n0.0" \
    FTC_ASSIGN_TIMEOUT_MS=0
rm -f "$T"/assign.n0.0*
# a restarted rank's FTC_PREV_WORLD_SIZE / FTC_RESTORE_RANK (from ftc run): garbage fell back to
# "no layout change" (the rank restored its own number's chunk); now a configuration error
# (exit 2) from trainer creation, before the agent (none here) is asked anything
agentcase() { # agentcase NAME VAR=VALUE...
    local name=$1
    shift
    env -u RANK -u WORLD_SIZE -u FTC_AGENT_SOCKET "$@" timeout 20 "$FTC" train "${FLAGS[@]}" \
        --backend cpu --agent "$T/no-agent.sock" >"$T/env.out" 2>&1
    local rc=$?
    local said=no
    grep -qF -- "$name='" "$T/env.out" && said=yes
    check "$* with --agent: exit $rc naming $name (said: $said)" test "$rc/$said" = "2/yes"
    [ "$rc/$said" = "2/yes" ] || cat "$T/env.out"
}
agentcase FTC_PREV_WORLD_SIZE FTC_PREV_WORLD_SIZE=abc
agentcase FTC_PREV_WORLD_SIZE FTC_PREV_WORLD_SIZE=" 2"
agentcase FTC_RESTORE_RANK FTC_RESTORE_RANK=1x
agentcase FTC_RESTORE_RANK FTC_RESTORE_RANK=-1

# --agent-call-timeout-ms is the deadline of the rank's calls to its agent (it was libftc's
# 60 s, whatever the trainer was given): an agent socket that takes the connection and never
# answers ends the run with FTC_ETIMEDOUT naming 1000 ms; 0 is a usage error naming the flag
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])
s.listen(64)
time.sleep(60)' "$T/mute.sock" &
mute=$!
for i in $(seq 100); do [ -S "$T/mute.sock" ] && break; sleep 0.05; done
env -u RANK -u WORLD_SIZE -u FTC_AGENT_SOCKET timeout 30 "$FTC" train "${FLAGS[@]}" \
    --backend cpu --agent "$T/mute.sock" --agent-call-timeout-ms 1000 >"$T/mute.out" 2>&1
rc=$?
kill "$mute" 2>/dev/null
wait "$mute" 2>/dev/null
check "a mute agent, --agent-call-timeout-ms 1000: exit $rc, FTC_ETIMEDOUT naming 1000 ms" \
    bash -c "[ $rc -eq 1 ] && grep -q 'agent call timeout 1000 ms' '$T/mute.out'"
[ $rc -eq 1 ] && grep -q 'agent call timeout 1000 ms' "$T/mute.out" || cat "$T/mute.out"
env -u RANK -u WORLD_SIZE timeout 20 "$FTC" train "${FLAGS[@]}" --agent-call-timeout-ms 0 \
    >"$T/mute.out" 2>&1
rc=$?
check "--agent-call-timeout-ms 0: usage error (exit $rc) naming it" bash -c \
    "[ $rc -eq 2 ] && grep -q -- '--agent-call-timeout-ms must be 1..86400000' '$T/mute.out'"

# ---- the fault injection variable, strictly ------------------------------------------------
diecase() { # diecase VALUE: exit 2 naming FTC_TRAIN_DIE_IN_CKPT='VALUE', before any step
    env -u RANK -u WORLD_SIZE FTC_TRAIN_DIE_IN_CKPT="$1" timeout 20 "$FTC" train "${FLAGS[@]}" \
        --backend cpu --ckpt-dir "$T/die" --ckpt-every 1 >"$T/die.out" 2>&1
    local rc=$?
    local said=no steps
    grep -qF -- "FTC_TRAIN_DIE_IN_CKPT='$1'" "$T/die.out" && said=yes
    steps=$(grep -c '^step ' "$T/die.out")
    check "FTC_TRAIN_DIE_IN_CKPT='$1': usage error (exit $rc) naming it (said: $said), no step" \
        test "$rc/$said/$steps" = "2/yes/0"
    [ "$rc/$said/$steps" = "2/yes/0" ] || cat "$T/die.out"
    rm -rf "$T/die"
}
for v in 1:5x 1 x:5 " 0:2" 0:2: 64:2 0:0 -1:2 :2 0:; do diecase "$v"; done
env -u RANK -u WORLD_SIZE FTC_TRAIN_DIE_IN_CKPT=0:2 timeout 60 "$FTC" train "${FLAGS[@]}" \
    --backend cpu --ckpt-dir "$T/die" --ckpt-every 1 >"$T/die.out" 2>&1
rc=$?
check "FTC_TRAIN_DIE_IN_CKPT=0:2 kills rank 0 after step 2's checkpoint (exit $rc)" \
    bash -c "[ $rc -eq 137 ] && grep -q 'rank 0 killed with the checkpoint of step 2' '$T/die.out'"
[ $rc -eq 137 ] || cat "$T/die.out"
rm -rf "$T/die"

# ---- config flags that ftc train does not read ---------------------------------------------
# a shared setting given as a flag that ftc train ignores (--agent-timeout-ms: the agent's) was
# accepted without a word; now a warning naming flag and command, once (not per rank); none for
# job.id, which it reads, nor for a setting from the environment
printf 'abc' >"$T/w.txt"
env -u RANK -u WORLD_SIZE FTC_PERSIST_KEEP=5 "$FTC" train --tokenize "$T/w.txt" \
    --data "$T/w.bin" --agent-timeout-ms 5000 --job-id j >"$T/w.out" 2>&1
rc=$?
n=$(grep -c 'warning: .* is ignored by ftc train' "$T/w.out")
check "--agent-timeout-ms to ftc train: exit $rc, a warning naming it, only it ($n)" bash -c \
    "[ $rc -eq 0 ] && [ $n -eq 1 ] && grep -qF -- 'ftc train: warning: --agent-timeout-ms \
(agent.timeout_ms) is ignored by ftc train' '$T/w.out'"
[ $rc -eq 0 ] && [ "$n" -eq 1 ] || cat "$T/w.out"
timeout 120 "$FTC" train "${FLAGS[@]}" --global-batch 4 --steps 4 --nproc 2 --ckpt-dir "$T/ck" \
    --persist-keep 4 >"$T/w2.out" 2>&1
rc=$?
n=$(grep -c 'warning: --persist-keep (persist.keep) is ignored by ftc train' "$T/w2.out")
check "--persist-keep to ftc train --nproc 2: exit $rc, warned once (got $n)" \
    test "$rc/$n" = "2/1"

# ---- a plain SIGUSR1 to a rank (Slurm's --signal=USR1@N reaches every process of the step) ---
# logged and ignored: it killed a restart-mode rank (the default action), and made every
# in-process rank leave its generation; only the supervisor's queued request is one
port=$((20000 + $$ % 20000))
RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$FTC" train --model tiny \
    --steps 100000 --micro-batch 1 --seq-len 16 --log-every 1 >"$T/usr1.out" 2>&1 &
upid=$!
for _ in $(seq 600); do grep -q '^step 2/' "$T/usr1.out" && break; sleep 0.05; done
kill -USR1 "$upid"
for _ in $(seq 600); do grep -q 'SIGUSR1 from pid' "$T/usr1.out" && break; sleep 0.05; done
check "a plain SIGUSR1 to a rank: logged as ignored, the rank trains on" \
    bash -c "kill -0 $upid && grep -q 'rank 0: SIGUSR1 from pid $$ ignored' '$T/usr1.out'"
kill -KILL "$upid" 2>/dev/null
wait "$upid" 2>/dev/null

# ---- a fork of the launcher that fails -----------------------------------------------------
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && command -v prlimit >/dev/null; then
    # as nobody, with at most 3 processes: the launcher and ranks 0 and 1; rank 2's fork
    # fails. The binary is copied where nobody can run it (a build tree may be private).
    N=$(mktemp -d /tmp/traincli-nobody-XXXXXX)
    chmod 755 "$N" && cp "$FTC" "$N/ftc" && mkdir -m 1777 "$N/tmp"
    (cd "$N/tmp" && timeout 120 prlimit --nproc=3 setpriv --reuid=65534 --regid=65534 \
        --clear-groups env TMPDIR="$N/tmp" "$N/ftc" train "${FLAGS[@]}" --nproc 4 \
        --coll-timeout-ms 1000 --agent-call-timeout-ms 1000 >"$T/fork.out" 2>&1)
    rc=$?
    check "--nproc 4 with rank 2's fork failing: exit $rc, the error names rank 2" \
        bash -c "[ $rc -eq 1 ] && grep -q 'fork of rank 2' '$T/fork.out'"
    check "  and the ranks started are told their grace period (21000 ms)" \
        grep -q 'other ranks get 21000 ms to end' "$T/fork.out"
    grep -q 'other ranks get 21000 ms' "$T/fork.out" || cat "$T/fork.out"
    rm -rf "$N"
else
    echo "SKIPPED: a failing fork of --nproc (needs root, setpriv and prlimit)"
fi

if [ $fails -ne 0 ]; then
    echo "test_train_cli: $fails check(s) failed"
    exit 1
fi
echo "test_train_cli: all checks passed"
