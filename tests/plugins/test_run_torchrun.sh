#!/usr/bin/env bash
# test_run_torchrun.sh — `ftc run` takes torchrun's command line: real
# supervisors, agents, Redis (embedded, or `ftc redis` for --rdzv-endpoint)
# and ranks (envprobe_main prints what each got, a tiny Python script too).
#
#   1. --standalone --nproc_per_node=2 --max_restarts=1 --rdzv_id=J PROBE ARGS
#      (no --, underscores, =VALUE, --rdzv_conf with torchrun's keys, a bare
#      boolean setting just before the binary, which stays the binary): two
#      ranks of job J, ARGS untouched even
#      where they look like options (--job x), OMP_NUM_THREADS=1, ROLE_NAME,
#      --master_addr=127.0.0.1 (this node's) as MASTER_ADDR;
#   2. SCRIPT.py ARGS runs in python3 -u (skipped without python3);
#   3. -m MODULE ARGS with the module on PYTHONPATH (skipped without python3);
#   4. --no-python -- PROBE.py: a .py name executed directly, `--` kept;
#   5. --rdzv-backend=redis --rdzv-endpoint 127.0.0.1:PORT of a real
#      `ftc redis`, --master-port P, --log-dir with -r3 (attached, as
#      argparse takes it) --tee 0:1:
#      MASTER_PORT is P, no embedded Redis, each rank's stdout in
#      LOG/J/attempt_GEN/RANK/stdout.log, rank 0's on the console too, rank
#      1's not;
#   6. --master-port held by another listener (the Redis of 5): the round
#      fails with an error naming the port, exit 1 after --max-restarts 0;
#      --master-addr of another host is named as not used on this node;
#   7. usage errors, exit 2 with the message: --rdzv-backend c10d / etcd,
#      --rdzv-conf with an unknown key or a bad value, --standalone with --nnodes 2 or --rdzv-endpoint, -m with
#      --no-python, --redirects 5, --nproc-per-node gpu without a GPU;
#      --nproc-per-node cpu runs one rank per online core (when <= 4);
#   8. --log-dir -r3, the same job launched twice (generation 1 both times):
#      the second launch's output is appended, the first's kept.
#   9. the MASTER_ADDR key of a generation read back with a MASTER_PORT that
#      is no port ("P0x" for P0, rewritten in Redis's replies by a proxy in
#      front of `ftc redis`; skipped without python3): the node fails naming
#      MASTER_PORT, the value and what to do, and no rank starts (atoi took
#      "P0x" for port P0, which nobody serves).
#
# usage: test_run_torchrun.sh PATH/TO/ftc PATH/TO/envprobe_main
set -u
FTC=${1:?usage: test_run_torchrun.sh FTC ENVPROBE}
PROBE=${2:?usage: test_run_torchrun.sh FTC ENVPROBE}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/runtr-XXXXXX")
tag=$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf /dev/shm/ftc.tr"$tag"* 2>/dev/null
    [ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # check, count
unset FTC_NODE_RANK NODE_RANK SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_NODEID OMP_NUM_THREADS \
    FTC_REDIS_URL FTC_JOB_ID PYTHONUNBUFFERED # (-u must be what makes Python unbuffered)
export FTC_LOG_LEVEL=${FTC_LOG_LEVEL:-info}
want() { case ${FTC_RUN_ONLY:-123456789} in *$1*) return 0 ;; esac; return 1; }
# v FILE RANK NAME: variable NAME as rank RANK saw it
v() { sed -n "s/^PROBE RANK=$2 .*\b$3=\([^ ]*\).*/\1/p" "$1" | head -1; }
all() { grep '^PROBE ' "$1" | sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
ranks() { grep "^$2 " "$1" | sed "s/^$2 RANK=\([0-9]*\) .*/\1/" | sort -n | tr '\n' ' '; }
dump() { [ $fails -eq "$1" ] || { echo "--- $2:"; tail -30 "$2"; }; }
# a TCP port nobody listens on (/proc/net/tcp*: local address column, hex port)
free_port() {
    local p
    for p in $(seq $((20000 + tag % 20000)) 65000); do
        grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo "$p"; return; }
    done
}
HAVE_PY=1
command -v python3 >/dev/null || HAVE_PY=0
cat >"$T/train.py" <<'EOF'
import os, sys
# one write per line: under python3 -u, print() writes the text and its newline
# separately, and the two ranks share one stdout, so their lines could interleave
sys.stdout.write("PY RANK=%s WORLD_SIZE=%s UNBUFFERED=%d ARGS=%s\n" % (os.environ["RANK"],
      os.environ["WORLD_SIZE"], int(sys.stdout.write_through), ",".join(sys.argv[1:]) or "-"))
EOF
mkdir -p "$T/mods"
sed 's/^sys.stdout.write("PY /sys.stdout.write("MOD /' "$T/train.py" >"$T/mods/trprobe_mod.py"
# the same check for MOD lines (-m)
UNBUF_OK() { grep -q "^$1 .*UNBUFFERED=1" "$2"; }

# ---- 1. no --, underscores, =VALUE, --rdzv_id ---------------------------------------------
if want 1; then
f0=$fails
J=tr${tag}a
timeout 120 "$FTC" run --standalone --nproc_per_node=2 --max_restarts=1 --rdzv_id="$J" \
    --job_dir="$T/j1" --settle_ms=200 --role=trainer --master_addr=127.0.0.1 --persist_delta \
    --rdzv_conf=join_timeout=60,keep_alive_interval=1,keep_alive_max_attempt=2,read_timeout=60 \
    "$PROBE" --lr 3 -x --job foo -- z \
    >"$T/1.out" 2>&1
rc=$?
f=$T/1.out
check "1: ftc run (no --) finished (exit $rc)" test $rc -eq 0
check "1: RANK 0 and 1 ($(ranks "$f" PROBE))" test "$(ranks "$f" PROBE)" = "0 1 "
check "1: the job is --rdzv_id ($(all "$f" FTC_JOB_ID))" test "$(all "$f" FTC_JOB_ID)" = "$J"
check "1: ARGS untouched, options-looking too ($(all "$f" ARGS))" \
    test "$(all "$f" ARGS)" = "--lr,3,-x,--job,foo,--,z"
check "1: WORLD_SIZE 2, GROUP_WORLD_SIZE 1, ROLE_WORLD_SIZE 2" \
    test "$(all "$f" WORLD_SIZE)/$(all "$f" GROUP_WORLD_SIZE)/$(all "$f" ROLE_WORLD_SIZE)" = "2/1/2"
check "1: ROLE_NAME trainer, OMP_NUM_THREADS 1 ($(all "$f" ROLE_NAME), $(all "$f" OMP_NUM_THREADS))" \
    test "$(all "$f" ROLE_NAME)/$(all "$f" OMP_NUM_THREADS)" = "trainer/1"
check "1: --master-addr 127.0.0.1, this node's, is MASTER_ADDR ($(all "$f" MASTER_ADDR))" \
    test "$(all "$f" MASTER_ADDR)" = 127.0.0.1
check "1: --rdzv_conf taken; its read_timeout, which has no equivalent, named as ignored" \
    grep -q "rdzv-conf read_timeout=60 ignored" "$f"
dump $f0 "$f"
fi

# ---- 2. SCRIPT.py ----------------------------------------------------------------------------
if want 2; then
if [ $HAVE_PY = 0 ]; then
    echo "skip: 2: no python3 on PATH"
else
f0=$fails
timeout 120 "$FTC" run --simulate-nodes 1 --nproc-per-node 2 --job "tr${tag}b" \
    --job-dir "$T/j2" --settle-ms 200 "$T/train.py" --epochs 2 >"$T/2.out" 2>&1
rc=$?
f=$T/2.out
check "2: train.py ran (exit $rc)" test $rc -eq 0
check "2: as RANK 0 and 1 ($(ranks "$f" PY))" test "$(ranks "$f" PY)" = "0 1 "
check "2: WORLD_SIZE 2, its ARGS" test "$(grep -c '^PY .*WORLD_SIZE=2 .*ARGS=--epochs,2$' "$f")" -eq 2
check "2: in python3 -u (unbuffered)" UNBUF_OK PY "$f"
dump $f0 "$f"
fi
fi

# ---- 3. -m MODULE --------------------------------------------------------------------------------
if want 3; then
if [ $HAVE_PY = 0 ]; then
    echo "skip: 3: no python3 on PATH"
else
f0=$fails
PYTHONPATH="$T/mods" timeout 120 "$FTC" run --simulate-nodes 1 --job "tr${tag}c" \
    --job-dir "$T/j3" --settle-ms 200 -m trprobe_mod -a b >"$T/3.out" 2>&1
rc=$?
f=$T/3.out
check "3: -m trprobe_mod ran (exit $rc)" test $rc -eq 0
check "3: one rank, its ARGS ($(grep '^MOD ' "$f"))" \
    grep -q '^MOD RANK=0 WORLD_SIZE=1 .*ARGS=-a,b$' "$f"
check "3: in python3 -u -m (unbuffered)" UNBUF_OK MOD "$f"
dump $f0 "$f"
fi
fi

# ---- 4. --no-python with a .py name, and -- ------------------------------------------------
if want 4; then
f0=$fails
cp "$PROBE" "$T/probe.py"
timeout 120 "$FTC" run --simulate-nodes 1 --job "tr${tag}d" --job-dir "$T/j4" --settle-ms 200 \
    --no_python -- "$T/probe.py" --x >"$T/4.out" 2>&1
rc=$?
f=$T/4.out
check "4: --no-python executed probe.py itself (exit $rc)" test $rc -eq 0
check "4: RANK 0 with ARGS --x" test "$(v "$f" 0 ARGS)" = "--x"
dump $f0 "$f"
fi

# ---- 5./6. --rdzv-endpoint of `ftc redis`, --master-port, --log-dir ----------------------------
if want 5 || want 6 || want 9; then
J5=tr${tag}e
mkdir -p "$T/jr"
"$FTC" redis --job "$J5" --job-dir "$T/jr" >"$T/redis.out" 2>&1 &
rpid=$!
pids+=($rpid)
for i in $(seq 100); do [ -s "$T/jr/redis.url" ] && break; sleep 0.1; done
url=$(cat "$T/jr/redis.url" 2>/dev/null)
rport=$(echo "$url" | sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p')
export FTC_REDIS_PASSWORD
FTC_REDIS_PASSWORD=$(echo "$url" | sed -n 's|^redis://[^:]*:\([^@]*\)@.*|\1|p')
check "5: ftc redis is up (port $rport)" test -n "$rport" -a -n "$FTC_REDIS_PASSWORD"
fi
if want 5; then
f0=$fails
mp=$(free_port)
timeout 120 "$FTC" run --nproc-per-node 2 --rdzv-backend=redis --rdzv-endpoint "127.0.0.1:$rport" \
    --rdzv-id "$J5" --job-dir "$T/j5" --settle-ms 200 --master-port "$mp" --log-dir "$T/logs" \
    -r3 --tee 0:1 "$PROBE" >"$T/5.out" 2>&1
rc=$?
f=$T/5.out
check "5: the job ran on ftc redis (exit $rc)" test $rc -eq 0
check "5: no embedded Redis was started" bash -c "! grep -q 'embedded redis-server' '$f'"
gen=$(sed -n 's/.*generation \([0-9]*\): rank 0 .*/\1/p' "$f" | head -1)
L=$T/logs/$J5/attempt_$gen
for r in 0 1; do
    check "5: rank $r's stdout in $L/$r/stdout.log, stderr.log there" \
        bash -c "grep -q '^PROBE RANK=$r ' '$L/$r/stdout.log' && test -f '$L/$r/stderr.log'"
done
check "5: MASTER_PORT is --master-port $mp ($(all "$L/0/stdout.log" MASTER_PORT))" \
    test "$(all "$L/0/stdout.log" MASTER_PORT)" = "$mp"
# rank 0's stdout is tee'd: on the console too (the relay may write a moment after the exit)
for i in $(seq 50); do grep -q '^PROBE RANK=0 ' "$f" && break; sleep 0.1; done
check "5: rank 0's stdout is on the console too (--tee 0:1)" grep -q '^PROBE RANK=0 ' "$f"
check "5: rank 1's is not (-r3)" bash -c "! grep -q '^PROBE RANK=1 ' '$f'"
dump $f0 "$f"
fi
if want 6; then
f0=$fails
timeout 120 "$FTC" run --standalone --job "tr${tag}f" --job-dir "$T/j6" --settle-ms 200 \
    --max-restarts 0 --master-port "$rport" --master-addr 192.0.2.1 "$PROBE" >"$T/6.out" 2>&1
rc=$?
f=$T/6.out
check "6: a --master-port in use fails the job (exit $rc)" test $rc -eq 1
check "6: the error names the port" grep -q "MASTER_PORT $rport (--master-port) cannot be bound" "$f"
check "6: no rank started" bash -c "! grep -q '^PROBE ' '$f'"
check "6: --master-addr 192.0.2.1, not this node's, is named as not used here" \
    grep -q "master-addr 192.0.2.1 is not an address of this node" "$f"
dump $f0 "$f"
fi
# ---- 9. a MASTER_PORT in Redis that is no port ---------------------------------------------
if want 9 && [ $HAVE_PY = 1 ]; then
f0=$fails
mp=$(free_port)
pp=$((mp + 1))
while grep -qi ":$(printf '%04X' "$pp") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
    pp=$((pp + 1))
done
# a TCP proxy to ftc redis whose replies carry "HOST:${mp%?}x" where Redis said "HOST:$mp"
# (the same length: the RESP framing holds); the SET of node 0 reaches Redis unchanged
cat >"$T/proxy.py" <<EOF
import socket, threading
good, bad = b":$mp\r\n", b":${mp%?}x\r\n"
def pump(a, b, fix):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d.replace(good, bad) if fix else d)
    except OSError:
        pass
    for c in (a, b):
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", $pp))
ls.listen(64)
while True:
    c, _ = ls.accept()
    r = socket.create_connection(("127.0.0.1", $rport))
    threading.Thread(target=pump, args=(c, r, False), daemon=True).start()
    threading.Thread(target=pump, args=(r, c, True), daemon=True).start()
EOF
python3 "$T/proxy.py" &
ppid=$!
pids+=($ppid)
for i in $(seq 50); do grep -qi ":$(printf '%04X' "$pp") " /proc/net/tcp && break; sleep 0.1; done
timeout 120 "$FTC" run --nproc-per-node 1 --rdzv-backend=redis --rdzv-endpoint "127.0.0.1:$pp" \
    --rdzv-id "tr${tag}j" --job-dir "$T/j9" --settle-ms 200 --master-port "$mp" \
    --max-restarts 0 "$PROBE" >"$T/9.out" 2>&1
rc=$?
f=$T/9.out
check "9: a MASTER_PORT that is no port fails the node (exit $rc)" test $rc -eq 1
check "9: the error names MASTER_PORT, '${mp%?}x' and the range" \
    grep -q "holds MASTER_PORT '${mp%?}x' .*not a port in 1\.\.65535" "$f"
check "9: and says what to do" grep -q "run the same ftc on every node" "$f"
check "9: no rank started" bash -c "! grep -q '^PROBE ' '$f'"
kill "$ppid" 2>/dev/null
dump $f0 "$f"
fi

if want 5 || want 6 || want 9; then
    kill "$rpid" 2>/dev/null
    wait "$rpid" 2>/dev/null
    unset FTC_REDIS_PASSWORD
fi

# ---- 7. usage errors (nothing is started) ----------------------------------------------------
if want 7; then
f0=$fails
# usage EXPECTED_REGEX ARGS...: exit 2 with the message
usage() {
    local re=$1
    shift
    "$FTC" run --job "tr${tag}g" --job-dir "$T/j7" "$@" >"$T/7.out" 2>&1
    local rc=$? ok=false
    [ $rc -eq 2 ] && grep -q -- "$re" "$T/7.out" && ok=true
    check "7: ftc run $* -> exit 2 ($rc), /$re/" $ok
}
usage "rdzv-backend c10d is not supported: ftc's rendezvous runs on Redis" \
    --rdzv-backend c10d --rdzv-endpoint host:29400 "$PROBE"
usage "rdzv-backend etcd is not supported.*ftc redis" --rdzv_backend=etcd "$PROBE"
usage "rdzv-conf: unknown key 'bogus'" --rdzv-conf join_timeout=5,bogus=1 "$PROBE"
usage "rdzv-conf join_timeout='x': expected seconds" --rdzv-conf join_timeout=x "$PROBE"
usage "standalone is one node" --standalone --nnodes 2 "$PROBE"
usage "standalone is one node" --standalone --rdzv-endpoint 127.0.0.1:1 "$PROBE"
usage "module and --no-python exclude" -m --no-python "$PROBE"
usage "redirects '5'" --redirects 5 "$PROBE"
usage "no training binary" --nproc_per_node 2
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    usage "nproc-per-node gpu: no CUDA device" --nproc-per-node gpu "$PROBE"
fi
check "7: nothing was started" test ! -e "$T/j7/redis.url"
cores=$(getconf _NPROCESSORS_ONLN)
if [ "$cores" -le 4 ]; then
    timeout 120 "$FTC" run --simulate-nodes 1 --nproc-per-node cpu --job "tr${tag}h" \
        --job-dir "$T/j8" --settle-ms 200 "$PROBE" >"$T/8.out" 2>&1
    rc=$?
    check "7: --nproc-per-node cpu: $cores rank(s) (exit $rc, WORLD_SIZE $(all "$T/8.out" WORLD_SIZE))" \
        test $rc -eq 0 -a "$(all "$T/8.out" WORLD_SIZE)" = "$cores"
else
    echo "skip: 7: --nproc-per-node cpu would run $cores ranks"
fi
dump $f0 "$T/7.out"
fi

# ---- 8. --log-dir across launches ------------------------------------------------------------
# The same job launched twice (a crashed job started again with its
# --rdzv-id; a fresh embedded Redis, so generation 1 again): the second
# launch's output goes after the first's in attempt_1/RANK/stdout.log (the
# files were truncated: the crashed launch's logs were lost).
if want 8; then
f0=$fails
for k in 1 2; do
    timeout 120 "$FTC" run --standalone --rdzv-id "tr${tag}i" --job-dir "$T/j8.$k" --settle-ms 200 \
        --log-dir "$T/logs8" -r3 "$PROBE" launch$k >"$T/8.$k.out" 2>&1
    rc=$?
    check "8: launch $k finished (exit $rc)" test $rc -eq 0
done
L=$T/logs8/tr${tag}i/attempt_1/0/stdout.log
check "8: both launches' output in $L ($(grep -c '^PROBE ' "$L" 2>/dev/null))" \
    bash -c "grep -q 'ARGS=launch1' '$L' && grep -q 'ARGS=launch2' '$L'"
dump $f0 "$T/8.2.out"
fi

if [ $fails -ne 0 ]; then
    echo "test_run_torchrun: $fails check(s) failed"
    exit 1
fi
echo "test_run_torchrun: all checks passed"
