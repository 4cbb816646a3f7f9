#!/usr/bin/env bash
# test_run.sh — `ftc run` in restart mode, end to end with real processes, a
# real embedded Redis, real agents and real signals (tests/ckpt/rank_main is
# the training binary: it checkpoints every step through include/ftc.h and
# checks, byte for byte, the state it restores).
#
#   1. a rank kills itself (SIGKILL) after a committed step: every node stops
#      its ranks, a new generation starts, every rank restores the committed
#      step and the job finishes; at the end each node flushes the last
#      committed step to its persist directory and removes its /dev/shm state;
#   2. a node is lost (its supervisor, agent and ranks killed with SIGKILL and
#      its shared memory wiped): the two survivors shrink to a world of 2, the
#      rank that moved restores its shard from a peer's memory, and the lost
#      node comes back (a new `ftc run --node-rank 1`) and the job grows back,
#      at a checkpoint boundary: it arrives while the survivors replace their
#      agents (the old ones stopped, the new ones 3 s late:
#      FTC_TEST_RUN_AGENT_DELAY_MS), when no member heartbeats, and their
#      supervisors' leases, with the values recorded in the generation's plan,
#      say the generation runs (it took it for dead and joined at once);
#   3. a rank stopped with SIGSTOP is found hung, killed and the job recovers
#      (--keep-shm: the slots stay after the end);
#   4. an unmodified binary (tests/plugins/ckptfile_main: rank 0 saves its
#      own state file in FTC_CKPT_DIR) loses the node that wrote the file: the
#      new rank 0 on another node loads it, put back from a peer's memory.
#   5. 1 with `--in-process` and a binary that does not know the mode (no
#      state file): its surviving ranks are stopped and started again, as in
#      restart mode, and the job finishes.
#   6. --tp 2 on 3 nodes (an idle slot), a node lost; 7. parity (xor:2) under
#      ftc run; 8. parity with an idle slot (--tp 2 --redundancy xor:2), a
#      node lost and replaced: its rank's shard is rebuilt from parity;
#   9. parity (xor:2, --tp 2), a node lost and not replaced: the job shrinks,
#      the moved rank's shard is rebuilt from parity on a survivor, and the
#      shrunk generation forms its parity groups over its 2 nodes and commits;
#   0. (10) the whole job killed and started again on its Redis (`ftc redis`):
#      it joins at once and restores the committed step;
#   r. (11) the job's Redis paused (SIGSTOP) for 3 s, three heartbeat TTLs:
#      the job trains through it, no node is declared lost, nothing restarts;
#   f. (12) the job's Redis loses its data (FLUSHALL) mid-run: the job
#      finishes, and no generation number is made twice;
#   c. --ckpt-dir with --ckptdir-max-bytes under the binary's file: the cap,
#      a setting, refuses the directory (named in the log), the job runs on.
#   m. three `ftc run` of one job (--tp 2, a node idle), the node of rank 0
#      killed: the idle node takes rank 0, and MASTER_ADDR is its host.
#   g. --max-restarts 0 on one node, a second node joins: the grow is not a
#      failure (torchrun's count), the job finishes on both.
#   s. a node arriving at a full job (--nnodes 1) waits as a hot spare
#      without interrupting it, past --join-timeout-ms, and exits 0 at the end;
#      when the member is killed, the spare takes over and finishes the job;
#      a spare left alone below MIN ends with an error;
#   p. a rank exits 1 while the job's Redis is paused (SIGSTOP, 12 s): the
#      next round opens once Redis answers, the job finishes;
#   l. a node's supervisor gets SIGTERM (a preemption): the other node goes
#      on alone in a new generation and finishes the job;
#   x. a node that cannot start its rank (its log directory) gives up: the
#      other node goes on alone and finishes the job;
#   y. a member whose agent cannot start gives up right after the round: the
#      other node, waiting for that agent, goes on alone at once;
#   w. a grow with --settle-ms shorter than the time the survivor takes to
#      stop its rank: the round waits for the survivor, not the newcomer alone;
#   k. a member SIGKILLed after the round closed: its loss (node_lost) ends
#      the other node's wait for its agent at once (not --join-timeout-ms).
#   h. node 1's rank SIGSTOPped before it connects to its agent (it has not
#      even exec'd the trainer): node 0's rank connected, so the job links
#      libftc (ftc:{J}:linked), and the stopped rank is found hung at the
#      start-up limit (--detect-start-ms), killed, and the job finishes. It
#      was never found: the others waited in their set-up for it.
#   n. a node killed (SIGKILL) after it joined a round, before its agent ran:
#      its supervisor's lease ends the others' wait, and its loss is one
#      node_lost event (its previous incarnation's, killed with its agent
#      running, another one, even when that one had the same pid); one whose
#      agent had joined: the detector's event and the lease's report are one.
#
# usage: test_run.sh PATH/TO/ftc PATH/TO/rank_main PATH/TO/ckptfile_main
set -u
FTC=${1:?usage: test_run.sh FTC RANK_MAIN}
RANK=${2:?usage: test_run.sh FTC RANK_MAIN CKPTFILE_MAIN}
CKF=${3:?usage: test_run.sh FTC RANK_MAIN CKPTFILE_MAIN}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/run-XXXXXX")
tag=$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf /dev/shm/ftc.run"$tag"* 2>/dev/null # slots, and FTC_CKPT_DIR directories
    [ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # check, count, committed, wait_committed
export FTC_LOG_LEVEL=${FTC_LOG_LEVEL:-info}
# FTC_RUN_ONLY=24 runs scenarios 2 and 4 only (while debugging), in this process
want() { case ${FTC_RUN_ONLY:-1234567890rfcmgwsplxykhn} in *$1*) return 0 ;; esac; return 1; }

# Without FTC_RUN_ONLY, the scenarios run in two lanes side by side: the script
# runs itself twice, each with about half of them (about 2 minutes each on 2
# loaded cores). They are independent (each its own job id, job directory,
# Redis and /dev/shm names) and mostly wait (ranks sleeping --step-ms,
# heartbeat TTLs, deadlines: one after the other they kept about a quarter of
# one core busy for almost 4 minutes).
if [ -z "${FTC_RUN_ONLY:-}" ]; then
    lanes=(123567rgcslxy 4890fmwkhnp)
    lane=()
    for l in 0 1; do
        FTC_RUN_ONLY=${lanes[$l]} bash "$0" "$@" >"$T/lane$l.out" 2>&1 &
        lane[$l]=$!
        pids+=($!)
    done
    rc=0
    for l in 0 1; do wait "${lane[$l]}" || rc=1; done
    for l in 0 1; do
        echo "=== lane $l: FTC_RUN_ONLY=${lanes[$l]}"
        cat "$T/lane$l.out"
    done
    [ $rc -eq 0 ] && echo "test_run: both lanes passed" || echo "test_run: a lane failed"
    exit $rc
fi

# ---- 1. a rank dies -------------------------------------------------------------------
if want 1; then
J1=run${tag}a
# a persist tier that the job never writes during the run (every 1000
# commits): the job's end flushes the last committed step into it
timeout 120 "$FTC" run --simulate-nodes 3 --job "$J1" --job-dir "$T/j1" --max-restarts 2 \
    --settle-ms 300 --persist-dir "$T/p1" --persist-every 1000 -- "$RANK" --steps 20 \
    --step-ms 30 --floats 4096 --restore --die-after 6 --die-rank 1 --strict >"$T/1.out" 2>&1
rc=$?
check "1: ftc run finished the job after a rank died (exit $rc)" test $rc -eq 0
check "1: the rank's death failed the generation" grep -q "rank 1 (node node[0-9]) was killed by signal 9" "$T/1.out"
check "1: every rank restored a committed step, byte for byte ($(count 'RESTORED [0-9]* OK' "$T/1.out"))" \
    test "$(count 'RESTORED [0-9]* OK' "$T/1.out")" -ge 3
check "1: no bad restore, no error" bash -c "! grep -q 'RESTORED [0-9]* BAD\|^ERROR' '$T/1.out'"
check "1: every rank reached the last step" test "$(count 'COMMITTED 19' "$T/1.out")" -ge 3
check "1: at the job's end each node flushed step 19 to its persist directory" \
    test -f "$T/p1/node0/v00000000000000000019/COMMITTED" -a \
    -f "$T/p1/node1/v00000000000000000019/COMMITTED" -a -f "$T/p1/node2/v00000000000000000019/COMMITTED"
check "1: and removed its shared memory (slots, replicas)" \
    bash -c "! ls /dev/shm/ftc.$J1.* >/dev/null 2>&1"
[ $fails -eq 0 ] || { echo "--- output of 1:"; tail -60 "$T/1.out"; }
fi

# ---- 2. a node is lost, the job shrinks, the node comes back ---------------------------------
if want 2; then
J2=run${tag}b
f0=$fails
# (each generation's agents start 3 s after the old ones stopped, as on a loaded node: the
# returning node arrives meanwhile, while no member heartbeats; it took the generation for
# dead and joined at once, "no live member", instead of waiting for a checkpoint boundary)
FTC_TEST_RUN_AGENT_DELAY_MS=3000 \
"$FTC" run --simulate-nodes 3 --nnodes 2:3 --job "$J2" --job-dir "$T/j2" --max-restarts 4 \
    --settle-ms 500 -- "$RANK" --steps 160 --step-ms 40 --floats 4096 --restore --strict \
    >"$T/2.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "2: the job committed step 5" wait_committed "$J2" "$T/j2" 5 60
victim=$(cat "$T/j2/node1.pid" 2>/dev/null)
check "2: node 1 has a pid file" test -n "$victim"
kill -9 "$victim"
rm -f /dev/shm/ftc."$J2".n1.* 2>/dev/null # the node's memory is gone with it
check "2: the survivors shrank to 2 nodes" bash -c \
    "for i in \$(seq 300); do grep -q 'of 2, world 2' '$T/2.out' && exit 0; sleep 0.1; done; exit 1"
# (that the shrunk job commits again is shown below by its ranks finishing
# their last step, which waits for its commit: no wall-clock bound here)
# the node comes back: a new supervisor for index 1 joins, the job grows back
url=$(cat "$T/j2/redis.url")
"$FTC" run --node-rank 1 --nnodes 2:3 --job "$J2" --job-dir "$T/j2" --redis "$url" \
    --max-restarts 4 --settle-ms 500 -- "$RANK" --steps 160 --step-ms 40 --floats 4096 \
    --restore --strict >"$T/2b.out" 2>&1 &
pids+=($!)
back=$!
check "2: the returning node joined a 3-node generation" bash -c \
    "for i in \$(seq 400); do grep -q 'of 3, world 3' '$T/2b.out' && exit 0; sleep 0.1; done; exit 1"
# (unless it found a round open, still the shrink's: then it joined that; on
# a loaded machine the survivors may commit nothing within --grow-wait-ms,
# and then it joins after that wait: still not at once)
grep -q 'a round is open' "$T/2b.out" ||
    check "2: it asked for the grow at a checkpoint boundary (the next commit, or after the wait)" \
        grep -q 'joining at the checkpoint boundary: step [0-9]* committed\|joining without a checkpoint boundary: no commit in' "$T/2b.out"
check "2: it did not take the starting generation (supervisors' leases, no heartbeat yet) for dead" \
    bash -c "! grep -q 'has no live member' '$T/2b.out'"
wait $runpid
rc=$?
wait $back
rc2=$?
check "2: the simulated job finished (exit $rc)" test $rc -eq 0
check "2: the returning node finished (exit $rc2)" test $rc2 -eq 0
check "2: ranks restored committed state after the loss ($(count 'RESTORED [0-9]* OK' "$T/2.out"))" \
    test "$(count 'RESTORED [0-9]* OK' "$T/2.out")" -ge 2
check "2: the returning node's rank restored from peers" grep -q 'RESTORED [0-9]* OK' "$T/2b.out"
# (the killed node's rank may see its agent's socket close before the
# SIGKILL its supervisor's death sends it arrives: that ERROR is expected)
check "2: no bad restore, no error" no_errors "" "$T/2.out" "$T/2b.out"
check "2: the node loss was detected (a node_lost event failed the generation)" \
    grep -q "failed (node node[0-9] lost (heartbeat" "$T/2.out"
[ $fails -eq $f0 ] || { echo "--- output of 2:"; tail -80 "$T/2.out"; echo "--- 2b:"; tail -40 "$T/2b.out"
    echo "--- 2/2b: errors, warnings and generations:"
    cat "$T/2.out" "$T/2b.out" | grep -n 'RESTORED [0-9]* BAD\|ERROR\|WARN\|generation [0-9]*:' | head -60; }
fi

# ---- 3. a rank hangs (SIGSTOP) ---------------------------------------------------------------
if want 3; then
J3=run${tag}c
f0=$fails
"$FTC" run --simulate-nodes 2 --job "$J3" --job-dir "$T/j3" --max-restarts 2 --settle-ms 300 \
    --keep-shm --detect-hang-ms 2000 -- "$RANK" --steps 120 --step-ms 40 --floats 4096 --restore --strict >"$T/3.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "3: the job committed step 8" wait_committed "$J3" "$T/j3" 8 60
node=$(cat "$T/j3/node0.pid")
victim=$(pgrep -P "$node" -f rank_main | head -1)
check "3: found node 0's rank" test -n "$victim"
kill -STOP "$victim"
wait $runpid
rc=$?
check "3: the job finished after the hang (exit $rc)" test $rc -eq 0
check "3: the hang was detected, at the --detect-hang-ms floor" grep -q "hangs (.*limit 2000 ms)" "$T/3.out"
check "3: the generation failed for the hang (not for the SIGKILL that ended it)" \
    grep -q "failed (rank [0-9]* (node node0) hung and was killed: rank [0-9]* made no progress" \
    "$T/3.out"
check "3: --keep-shm left the nodes' slots in /dev/shm" \
    bash -c "ls /dev/shm/ftc.$J3.n0.r[0-9]*.s0 && ls /dev/shm/ftc.$J3.n1.r[0-9]*.s0"
check "3: no bad restore, no error" bash -c "! grep -q 'RESTORED [0-9]* BAD\|^ERROR' '$T/3.out'"
[ $fails -eq $f0 ] || { echo "--- output of 3:"; tail -60 "$T/3.out"; }
fi

# ---- 5. --in-process, a binary that does not know it: restart mode for its ranks ----------------
if want 5; then
J5=run${tag}e
f0=$fails
timeout 120 "$FTC" run --simulate-nodes 3 --in-process --job "$J5" --job-dir "$T/j5" \
    --max-restarts 2 --settle-ms 300 -- "$RANK" --steps 20 --step-ms 30 --floats 4096 --restore \
    --die-after 6 --die-rank 1 --strict >"$T/5.out" 2>&1
rc=$?
check "5: ftc run --in-process finished the job of an in-process-unaware binary (exit $rc)" \
    test $rc -eq 0
check "5: every node started its ranks again (none continued in-process)" \
    test "$(count 'why=in-process: 0 ranks continued, 1 started' "$T/5.out")" -ge 3 -a \
    "$(count 'generation 2: rank [0-9] (local 0 of 1, world 3) is pid' "$T/5.out")" -eq 3
check "5: every rank restored a committed step, byte for byte" \
    test "$(count 'RESTORED [0-9]* OK' "$T/5.out")" -ge 3
check "5: no bad restore, no error" bash -c "! grep -q 'RESTORED [0-9]* BAD\|^ERROR' '$T/5.out'"
[ $fails -eq $f0 ] || { echo "--- output of 5:"; tail -60 "$T/5.out"; }
fi

# ---- 4. an unmodified binary and FTC_CKPT_DIR ---------------------------------------------------
# ---- 6. the layout planner: --tp 2 on 3 one-slot nodes ----------------------------------------
# dp x tp = 1 x 2: two ranks, one node idle (it still holds replicas). The
# node of one rank is killed: the survivor stays in place and the idle node
# takes the lost TP rank (same tp coordinate), restoring its shard from a
# peer's memory.
if want 6; then
J6=run${tag}f
f0=$fails
"$FTC" run --simulate-nodes 3 --nnodes 2:3 --tp 2 --job "$J6" --job-dir "$T/j6" --max-restarts 4 \
    --settle-ms 500 -- "$RANK" --steps 120 --step-ms 40 --floats 4096 --restore --strict \
    >"$T/6.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "6: the job committed step 5" wait_committed "$J6" "$T/j6" 5 60
check "6: the planner made world 2 (dp 1 x tp 2) with an idle slot" \
    grep -q 'generation 1: layout dp 1 x tp 2 x pp 1 = world 2 on 3 nodes' "$T/6.out"
# the node of rank 1 (TP coordinate 1)
lose_rank1_node 6 "$J6" "$T/j6" "$T/6.out"
n6=$lost_node
wait $runpid
rc=$?
check "6: the job finished on the two other nodes (exit $rc)" test $rc -eq 0
check "6: the new layout kept the survivor in place and moved rank 1 to the idle node" \
    grep -q 'layout dp 1 x tp 2 x pp 1 = world 2 on 2 nodes x 1 slots; 1 ranks in place, 1 moved' \
    "$T/6.out"
# (the replica the lost node pushed: fetched from its holder, or already in
# the idle node's own replica store when it was the ring successor)
check "6: rank 1's shard came from a replica in memory" \
    grep -q "rank 1 restored step [0-9]* from \(a peer's replica\|this node's replica store\)" \
    "$T/6.out"
check "6: no bad restore, no error" no_errors "" "$T/6.out"
check "6: both ranks reached the last step" test "$(count 'COMMITTED 119' "$T/6.out")" -ge 2
[ $fails -eq $f0 ] || { echo "--- output of 6:"; tail -60 "$T/6.out"; }
fi

# ---- 7. parity redundancy under ftc run ----------------------------------------------------
# --redundancy xor:2 (a group of 3 nodes, 2 data + 1 parity): the agents find
# each rank's node and stripe in ftc run's published layout (plan:GEN), so
# versions commit; a rank killed mid-run restarts and restores its committed
# step, and commits go on in the next generation.
if want 7; then
J7=run${tag}g
f0=$fails
timeout 120 "$FTC" run --simulate-nodes 3 --redundancy xor:2 --job "$J7" --job-dir "$T/j7" \
    --max-restarts 2 --settle-ms 300 -- "$RANK" --steps 30 --step-ms 30 --floats 4096 --restore \
    --die-after 6 --die-rank 1 --strict >"$T/7.out" 2>&1
rc=$?
check "7: the parity job finished after a rank died (exit $rc)" test $rc -eq 0
check "7: parity was encoded under ftc run" grep -q 'parity of 3 shards encoded' "$T/7.out"
check "7: every rank restored a committed step, byte for byte" \
    test "$(count 'RESTORED [0-9]* OK' "$T/7.out")" -ge 3
check "7: no parity refusal, no bad restore, no error" bash -c \
    "! grep -q 'parity groups need\|RESTORED [0-9]* BAD\|^ERROR' '$T/7.out'"
check "7: every rank's last step committed" test "$(count 'COMMITTED 29' "$T/7.out")" -ge 3
# node 1 lost and replaced (--nnodes 3:3: the survivors wait for it); the
# replacement's rank gets its shard rebuilt from the survivors' data and
# parity (their agents restarted for the new generation meanwhile)
J7b=run${tag}h
"$FTC" run --simulate-nodes 3 --nnodes 3:3 --redundancy xor:2 --job "$J7b" --job-dir "$T/j7b" \
    --max-restarts 4 --settle-ms 300 -- "$RANK" --steps 80 --step-ms 40 --floats 4096 --restore \
    --strict >"$T/7b.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "7b: the parity job committed step 5" wait_committed "$J7b" "$T/j7b" 5 60
victim=$(cat "$T/j7b/node1.pid" 2>/dev/null)
check "7b: node 1 has a pid file" test -n "$victim"
kill -9 "$victim"
rm -f /dev/shm/ftc."$J7b".n1.* 2>/dev/null
"$FTC" run --node-rank 1 --nnodes 3:3 --redundancy xor:2 --job "$J7b" --job-dir "$T/j7b" \
    --redis "$(cat "$T/j7b/redis.url")" --max-restarts 4 --settle-ms 300 -- "$RANK" --steps 80 \
    --step-ms 40 --floats 4096 --restore --strict >"$T/7c.out" 2>&1 &
p7c=$!
pids+=($p7c)
wait $runpid
rc=$?
wait $p7c
rc2=$?
check "7b: the job finished (exit $rc, replacement $rc2)" test $rc -eq 0 -a $rc2 -eq 0
check "7b: the replacement's rank was rebuilt from parity" grep -q 'rebuilt from parity' "$T/7c.out"
check "7b: no bad restore, no error" no_errors "no verified copy" "$T/7b.out" "$T/7c.out"
check "7b: every rank reached the last step" \
    test "$(cat "$T/7b.out" "$T/7c.out" | grep -c 'COMMITTED 79')" -ge 3
[ $fails -eq $f0 ] || { echo "--- output of 7:"; tail -40 "$T/7.out"; tail -30 "$T/7c.out"
    echo "--- 7b/7c: errors, warnings and generations:"
    cat "$T/7b.out" "$T/7c.out" | grep -n 'RESTORED [0-9]* BAD\|no verified copy\|ERROR\|WARN\|generation [0-9]*:' | head -60; }
fi

if want 4; then
J4=run${tag}d
f0=$fails
"$FTC" run --simulate-nodes 3 --nnodes 2:3 --ckpt-dir --job "$J4" --job-dir "$T/j4" \
    --max-restarts 2 --settle-ms 300 -- "$CKF" --steps 60 --step-ms 250 >"$T/4.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "4: rank 0 saved step 10 in FTC_CKPT_DIR" bash -c \
    "for i in \$(seq 600); do grep -q 'SAVED 10' '$T/4.out' 2>/dev/null && exit 0; sleep 0.1; done; exit 1"
sleep 1 # let the filestore push the newest version
victim=$(cat "$T/j4/node0.pid")
kill -9 "$victim"
rm -rf /dev/shm/ftc."$J4".ckptdir.n0 /dev/shm/ftc."$J4".n0.* /dev/shm/ftc."$J4".files.n0.* 2>/dev/null
wait $runpid
rc=$?
check "4: the job finished without the node that wrote the file (exit $rc)" test $rc -eq 0
check "4: the new rank 0 loaded the saved state from a peer's memory" \
    grep -q 'LOADED [1-9][0-9]* OK' "$T/4.out"
check "4: no bad load, no error" bash -c "! grep -q 'LOADED [0-9]* BAD\|^ERROR' '$T/4.out'"
check "4: every rank finished" test "$(count 'DONE 59' "$T/4.out")" -ge 2
[ $fails -eq $f0 ] || { echo "--- output of 4:"; tail -60 "$T/4.out"; }
fi

# ---- 8. parity with an idle slot under ftc run ---------------------------------------------
# --tp 2 on 3 nodes with xor:2: world 2, so one node's slot is idle in the
# group's only stripe (its data is the virtual zero shard; it holds parity).
# Versions commit; the node of rank 1 is lost and replaced (--nnodes 3:3),
# and the replacement's rank gets its shard rebuilt from the survivor's data,
# the zero shard and the parity the idle node holds.
if want 8; then
J8=run${tag}i
f0=$fails
"$FTC" run --simulate-nodes 3 --nnodes 3:3 --tp 2 --redundancy xor:2 --job "$J8" \
    --job-dir "$T/j8" --max-restarts 4 --settle-ms 300 -- "$RANK" --steps 80 --step-ms 40 \
    --floats 4096 --restore --strict >"$T/8.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "8: the parity job with an idle slot committed step 5" wait_committed "$J8" "$T/j8" 5 60
check "8: the planner made world 2 on 3 nodes (an idle slot)" \
    grep -q 'generation 1: layout dp 1 x tp 2 x pp 1 = world 2 on 3 nodes' "$T/8.out"
check "8: parity was encoded with the idle slot" grep -q 'parity of 3 shards encoded' "$T/8.out"
lose_rank1_node 8 "$J8" "$T/j8" "$T/8.out"
n8=$lost_node
"$FTC" run --node-rank "${n8#node}" --nnodes 3:3 --tp 2 --redundancy xor:2 --job "$J8" \
    --job-dir "$T/j8" --redis "$(cat "$T/j8/redis.url")" --max-restarts 4 --settle-ms 300 -- \
    "$RANK" --steps 80 --step-ms 40 --floats 4096 --restore --strict >"$T/8b.out" 2>&1 &
p8b=$!
pids+=($p8b)
wait $runpid
rc=$?
wait $p8b
rc2=$?
check "8: the job finished (exit $rc, replacement $rc2)" test $rc -eq 0 -a $rc2 -eq 0
check "8: the replacement's rank was rebuilt from parity" grep -q 'rebuilt from parity' "$T/8b.out"
check "8: no bad restore, no error" no_errors "no verified copy" "$T/8.out" "$T/8b.out"
check "8: both ranks reached the last step" \
    test "$(cat "$T/8.out" "$T/8b.out" | grep -c 'COMMITTED 79')" -ge 2
[ $fails -eq $f0 ] || { echo "--- output of 8:"; tail -60 "$T/8.out"; tail -30 "$T/8b.out"; }
fi

# ---- 9. parity under ftc run: a node lost, no replacement ---------------------------------
# --tp 2 on 3 nodes with xor:2 and --nnodes 2:3 (world 2, one group of the 3
# nodes, one idle slot): the node of rank 1 is lost and not replaced, the
# survivors shrink to 2 nodes and rank 1 moves to the node that was idle. Its
# committed shard is rebuilt there from parity of the committed generation's
# group (the survivor's data fetched, the parity the moved-to node holds read
# from its own replica store), with no persist tier, and checked byte for
# byte. The shrunk generation forms its parity groups over its 2 nodes
# (docs/agent.md "Groups of a generation") and commits: the job is stopped
# once it committed 5 steps past its restore.
if want 9; then
J9=run${tag}j
f0=$fails
"$FTC" run --simulate-nodes 3 --nnodes 2:3 --tp 2 --redundancy xor:2 --job "$J9" \
    --job-dir "$T/j9" --max-restarts 1 --settle-ms 300 -- "$RANK" --steps 400 --step-ms 40 \
    --floats 4096 --restore --strict >"$T/9.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "9: the parity job committed step 5" wait_committed "$J9" "$T/j9" 5 60
lose_rank1_node 9 "$J9" "$T/j9" "$T/9.out"
n9=$lost_node
check "9: after the shrink both ranks restored a committed step, byte for byte" bash -c \
    "for i in \$(seq 600); do [ \$(grep -c 'RESTORED [0-9]* OK' '$T/9.out') -ge 2 ] && exit 0; sleep 0.1; done; exit 1"
r9=$(sed -n 's/.*RESTORED \([0-9]*\) OK.*/\1/p' "$T/9.out" | sort -n | tail -1)
check "9: the shrunk generation commits under parity (past step ${r9:-?} + 5)" \
    wait_committed "$J9" "$T/j9" $((${r9:-1000000} + 5)) 60
s9=$(for i in 0 1 2; do [ "node$i" = "$n9" ] || printf '%s' "$i,"; done)
check "9: its groups are formed over its 2 nodes (${s9%,})" \
    grep -q "parity groups published for generation 2: xor:2 3 index ${s9%,}\$" "$T/9.out"
kill -TERM "$runpid" 2>/dev/null
for i in $(seq 150); do kill -0 "$runpid" 2>/dev/null || break; sleep 0.1; done
kill -9 -- "$runpid" 2>/dev/null
wait "$runpid" 2>/dev/null
check "9: the survivors shrank to 2 nodes, rank 1 moved" \
    grep -q 'generation 2: layout dp 1 x tp 2 x pp 1 = world 2 on 2 nodes x 1 slots; 1 ranks in place, 1 moved' "$T/9.out"
check "9: the moved rank was rebuilt from parity of its committed group" \
    grep -q "rebuilding rank 1's step [0-9]* from parity of the group of nodes 0..2 (generation 1: it was member ${n9#node}, node ${n9#node}" "$T/9.out"
check "9: and restored from it" grep -q 'rank 1 restored step [0-9]* rebuilt from parity' "$T/9.out"
check "9: no bad restore, no failed rebuild" bash -c "! grep -q 'RESTORED [0-9]* BAD\|RESTORE NONE: agent: no verified copy\|parity rebuild:' '$T/9.out'"
[ $fails -eq $f0 ] || { echo "--- output of 9:"; tail -80 "$T/9.out"; }
fi

# ---- 10. the whole job killed and started again on its Redis --------------------------------
# `ftc redis` keeps the job's Redis; the job is killed (every process,
# SIGKILL) once step 5 is committed and started again with the same job id:
# its nodes find generation 1 with nobody alive and join at once (not after
# --grow-wait-ms waiting for a checkpoint boundary that cannot come), and the
# ranks restore the committed step from the slots left in /dev/shm.
if want 0; then
J10=run${tag}k
f0=$fails
mkdir -p "$T/j10"
"$FTC" redis --job "$J10" --job-dir "$T/j10" >"$T/10.redis.out" 2>&1 &
rpid=$!
pids+=($rpid)
for i in $(seq 100); do [ -s "$T/j10/redis.url" ] && break; sleep 0.1; done
setsid "$FTC" run --simulate-nodes 2 --job "$J10" --job-dir "$T/j10" --max-restarts 1 \
    --settle-ms 300 -- "$RANK" --steps 200 --step-ms 40 --floats 4096 --restore --strict \
    >"$T/10.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "10: the job committed step 5" wait_committed "$J10" "$T/j10" 5 60
kill -9 -- -"$runpid" 2>/dev/null # the whole job: supervisors, agents, ranks
wait "$runpid" 2>/dev/null
timeout 120 "$FTC" run --simulate-nodes 2 --job "$J10" --job-dir "$T/j10" --max-restarts 1 \
    --settle-ms 300 --grow-wait-ms 60000 -- "$RANK" --steps 12 --step-ms 40 --floats 4096 \
    --restore --strict >"$T/10b.out" 2>&1
rc=$?
check "10: the restarted job finished (exit $rc)" test $rc -eq 0
check "10: it joined at once: generation 1 had no live member" \
    grep -q "generation 1 has no live member: joining at once" "$T/10b.out"
check "10: and did not wait for a checkpoint boundary" \
    bash -c "! grep -q 'joining without a checkpoint boundary' '$T/10b.out'"
check "10: both ranks restored a committed step, byte for byte" \
    test "$(count 'RESTORED [0-9]* OK' "$T/10b.out")" -ge 2
check "10: no bad restore, no error" bash -c "! grep -q 'RESTORED [0-9]* BAD\|^ERROR' '$T/10b.out'"
kill "$rpid" 2>/dev/null
wait "$rpid" 2>/dev/null
[ $fails -eq $f0 ] || { echo "--- output of 10b:"; tail -60 "$T/10b.out"; }
fi

# ---- 11. the job's Redis stops answering for a while ---------------------------------------
# A Redis that stalls (a fork for a save, a failover, a paused VM) for longer
# than the heartbeat TTL: every heartbeat key expires when it resumes unless
# its node refreshes it first. The supervisors keep their ranks training
# ("training continues, events are queued"), a node_lost for a node that
# heartbeats again is ignored, and the job ends in its first generation.
if want r; then
J11=run${tag}r
f0=$fails
"$FTC" run --simulate-nodes 3 --job "$J11" --job-dir "$T/j11" --max-restarts 2 \
    --settle-ms 300 -- "$RANK" --steps 150 --step-ms 40 --floats 4096 --restore --strict \
    >"$T/11.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "11: the job committed step 5" wait_committed "$J11" "$T/j11" 5 60
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/j11/redis.url")
rpid=$(pgrep -f "redis-server 127.0.0.1:$port\$" | head -1)
check "11: found the job's redis-server (port $port)" test -n "$rpid"
before=$(committed "$J11" "$T/j11")
[ -n "$rpid" ] && kill -STOP "$rpid"
sleep 3
[ -n "$rpid" ] && kill -CONT "$rpid"
wait $runpid
rc=$?
check "11: the job finished (exit $rc)" test $rc -eq 0
check "11: the supervisors saw the outage and trained on" \
    grep -q "redis unreachable .*training continues" "$T/11.out"
check "11: no generation after the first (no node declared lost)" \
    bash -c "! grep -q 'generation 2' '$T/11.out'"
check "11: every rank committed its last step after the outage (step $before before it)" \
    test "$(count 'COMMITTED 149' "$T/11.out")" -ge 3
check "11: no restore, no error" bash -c "! grep -q 'RESTORED\|^ERROR' '$T/11.out'"
[ $fails -eq $f0 ] || { echo "--- output of 11:"; tail -60 "$T/11.out"; }
fi

# ---- f. (12) the job's Redis loses its data (FLUSHALL: a restart without persistence) ------
if want f; then
J12=run${tag}p
f0=$fails
"$FTC" run --simulate-nodes 3 --job "$J12" --job-dir "$T/j12" --max-restarts 2 \
    --settle-ms 300 -- "$RANK" --steps 150 --step-ms 40 --floats 4096 --restore --strict \
    >"$T/12.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "12: the job committed step 5" wait_committed "$J12" "$T/j12" 5 60
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/j12/redis.url")
pw=$(sed -n 's|redis://:\([^@]*\)@.*|\1|p' "$T/j12/redis.url")
check "12: FLUSHALL" test "$(redis-cli --no-auth-warning -p "$port" -a "$pw" FLUSHALL)" = OK
wait $runpid
rc=$?
check "12: the job finished (exit $rc)" test $rc -eq 0
check "12: every rank committed its last step" test "$(count 'COMMITTED 149' "$T/12.out")" -ge 3
check "12: generations only grow (no second generation 1)" \
    test "$(count 'INFO run: generation 1: node 0 of' "$T/12.out")" -le 1
check "12: no bad restore, no error" no_errors "" "$T/12.out"
[ $fails -eq $f0 ] || { echo "--- output of 12:"; tail -60 "$T/12.out"; }
fi

# ---- c. the replicated checkpoint directory's limits are settings ---------------------------
# --ckptdir-max-bytes under the binary's file: no version is pushed, the log
# names the cap; the job itself runs on (the binary's saves still work).
if want c; then
Jc=run${tag}o
f0=$fails
"$FTC" run --simulate-nodes 2 --ckpt-dir --ckptdir-max-bytes 1000 --ckptdir-quiet-ms 50 \
    --ckptdir-busy-max-ms 2000 --job "$Jc" --job-dir "$T/jc" --settle-ms 300 \
    -- "$CKF" --steps 12 --step-ms 50 >"$T/c.out" 2>&1
rc=$?
check "c: the job finished (exit $rc)" test $rc -eq 0
check "c: the cap (--ckptdir-max-bytes 1000) refused the directory, naming it" \
    grep -q "over the cap of 1000 bytes" "$T/c.out"
check "c: every rank finished" test "$(count 'DONE 11' "$T/c.out")" -ge 2
[ $fails -eq $f0 ] || { echo "--- output of c:"; tail -40 "$T/c.out"; }
fi

# ---- m. MASTER_ADDR is the address of the node that runs rank 0 ---------------------------
# Three `ftc run` processes of one job (each its own --host) on `ftc redis`,
# --tp 2: world 2, one node idle. The node of rank 0 is killed: the survivor
# (rank 1) stays in place and is the round's first member, the idle node
# takes rank 0. Rank 0 hosts torch's store at MASTER_ADDR:MASTER_PORT, so
# every rank must get the host of the node that runs rank 0 (it used to be
# the round's first member's: the ranks would wait for a store nobody runs).
if want m; then
Jm=run${tag}m
f0=$fails
mkdir -p "$T/jm"
cat >"$T/m.sh" <<EOF
#!/bin/sh
echo "ENVM GEN=\$FTC_GENERATION RANK=\$RANK NODE=\$FTC_NODE_RANK GROUP=\$GROUP_RANK ADDR=\$MASTER_ADDR"
exec "$RANK" "\$@"
EOF
chmod +x "$T/m.sh"
"$FTC" redis --job "$Jm" --job-dir "$T/jm" >"$T/m.redis.out" 2>&1 &
rpid=$!
pids+=($rpid)
for i in $(seq 100); do [ -s "$T/jm/redis.url" ] && break; sleep 0.1; done
mpids=()
for n in 0 1 2; do
    "$FTC" run --nnodes 2:3 --node-rank $n --host "host$n" --tp 2 --job "$Jm" --job-dir "$T/jm" \
        --max-restarts 4 --settle-ms 500 -- "$T/m.sh" --steps 100 --step-ms 40 --floats 4096 \
        --restore --strict >"$T/m.$n.out" 2>&1 &
    mpids+=($!)
    pids+=($!)
done
check "m: the job committed step 5" wait_committed "$Jm" "$T/jm" 5 60
m0=$(grep -l 'generation 1: rank 0 (local' "$T"/m.[012].out | head -1 | sed 's/.*m\.\([012]\)\.out/\1/')
check "m: found the node of rank 0 (node $m0)" test -n "$m0"
if [ -n "$m0" ]; then
    kill -9 "${mpids[$m0]}"
    rm -f /dev/shm/ftc."$Jm".n"$m0".* 2>/dev/null
fi
rcs=""
for n in 0 1 2; do
    [ "$n" = "$m0" ] && continue
    wait "${mpids[$n]}"
    rcs="$rcs $?"
done
check "m: the two other nodes finished the job (exit$rcs)" test "$rcs" = " 0 0"
cat "$T"/m.[012].out >"$T/m.out"
g=$(sed -n 's/^ENVM GEN=\([0-9]*\) .*/\1/p' "$T/m.out" | sort -n | tail -1)
r0=$(grep "^ENVM GEN=$g RANK=0 " "$T/m.out" | head -1)
n0=$(echo "$r0" | sed -n 's/.* NODE=\([0-9]*\) .*/\1/p')
check "m: generation $g: rank 0 runs on a node that is not the round's first ($r0)" \
    bash -c "[[ '$r0' =~ GROUP=[1-9] ]]"
check "m: generation $g: every rank's MASTER_ADDR is host$n0, rank 0's node ($(grep "^ENVM GEN=$g " "$T/m.out" | sed 's/.*ADDR=//' | tr '\n' ' '))" \
    test "$(grep -c "^ENVM GEN=$g " "$T/m.out")/$(grep "^ENVM GEN=$g " "$T/m.out" | grep -vc " ADDR=host$n0\$")" = "2/0"
check "m: no bad restore, no error" no_errors "" "$T"/m.[012].out
kill "$rpid" 2>/dev/null
wait "$rpid" 2>/dev/null
[ $fails -eq $f0 ] || { echo "--- output of m:"; tail -n 30 "$T"/m.[012].out; }
fi

# ---- g. a grow is not a failure: --max-restarts 0 and a node that joins ---------------------
# torchrun does not count membership changes against --max-restarts. One
# node runs the job (--nnodes 1:2 --max-restarts 0); a second `ftc run`
# joins at a checkpoint boundary: the first node restarts its rank in the
# grow round and the job finishes on both (the grow used to count as a
# failed generation, and the first node gave up: "more than --max-restarts").
if want g; then
Jg=run${tag}q
f0=$fails
"$FTC" run --nnodes 1:2 --node-rank 0 --max-restarts 0 --job "$Jg" --job-dir "$T/jg" \
    --settle-ms 300 --grow-wait-ms 2000 -- "$RANK" --steps 150 --step-ms 40 --floats 4096 \
    --restore --strict >"$T/g.0.out" 2>&1 &
g0=$!
pids+=($g0)
check "g: the job committed step 5 on one node" wait_committed "$Jg" "$T/jg" 5 60
"$FTC" run --nnodes 1:2 --node-rank 1 --max-restarts 0 --job "$Jg" --job-dir "$T/jg" \
    --settle-ms 300 --grow-wait-ms 2000 -- "$RANK" --steps 150 --step-ms 40 --floats 4096 \
    --restore --strict >"$T/g.1.out" 2>&1 &
g1=$!
pids+=($g1)
wait $g1
rc1=$?
wait $g0
rc0=$?
check "g: both nodes finished the job (exit $rc0, $rc1)" test $rc0 -eq 0 -a $rc1 -eq 0
check "g: the job grew to 2 nodes" grep -q 'layout .* on 2 nodes' "$T/g.0.out"
check "g: the grow was not counted against --max-restarts" \
    grep -q 'not counted against --max-restarts' "$T/g.0.out"
check "g: both ranks reached the last step" \
    test "$(cat "$T"/g.[01].out | grep -c 'COMMITTED 149')" -ge 2
check "g: no bad restore, no error" no_errors "" "$T"/g.[01].out
[ $fails -eq $f0 ] || { echo "--- output of g:"; tail -n 30 "$T"/g.[01].out; }
fi

# ---- w. a grow with --settle-ms shorter than the survivor's stop ----------------------------
# One node runs the job with a rank that takes about 1.5 s to stop on SIGTERM
# (a wrapper that traps it, inside --grace-ms 6000), --settle-ms 200; a
# second node joins. The grow round waits for the survivor to stop its rank
# and register: it used to close on the settle time with the newcomer alone,
# and the survivor found the generation made without it.
if want w; then
Jw=run${tag}w
f0=$fails
cat >"$T/slowstop.sh" <<'WEOF'
#!/usr/bin/env bash
trap 'sleep 1.5; exit 143' TERM
"$@" &
wait $!
WEOF
chmod +x "$T/slowstop.sh"
"$FTC" run --nnodes 1:2 --node-rank 0 --job "$Jw" --job-dir "$T/jw" --settle-ms 200 \
    --grace-ms 6000 --grow-wait-ms 0 -- "$T/slowstop.sh" "$RANK" --steps 120 --step-ms 40 \
    --floats 4096 --restore --strict >"$T/w.0.out" 2>&1 &
w0=$!
pids+=($w0)
check "w: the job committed step 5 on one node" wait_committed "$Jw" "$T/jw" 5 60
"$FTC" run --nnodes 1:2 --node-rank 1 --job "$Jw" --job-dir "$T/jw" --settle-ms 200 \
    --grace-ms 6000 --grow-wait-ms 0 -- "$T/slowstop.sh" "$RANK" --steps 120 --step-ms 40 \
    --floats 4096 --restore --strict >"$T/w.1.out" 2>&1 &
w1=$!
pids+=($w1)
wait $w1
rc1=$?
wait $w0
rc0=$?
check "w: both nodes finished the job (exit $rc0, $rc1)" test $rc0 -eq 0 -a $rc1 -eq 0
check "w: the survivor was not left out of the grow round" \
    bash -c "! grep -q 'closed (generation [0-9]*) without node' '$T'/w.[01].out"
check "w: the grow made generation 2 with both nodes, none after it" \
    bash -c "grep -q 'layout .* on 2 nodes' '$T/w.0.out' && ! grep -q 'generation 3' '$T'/w.[01].out"
check "w: no bad restore, no error" no_errors "" "$T"/w.[01].out
[ $fails -eq $f0 ] || { echo "--- output of w:"; tail -n 30 "$T"/w.[01].out; }
fi

# ---- s. a hot spare ----------------------------------------------------------------------
# A one-node job (--nnodes 1) on `ftc redis`, and a second node for it (same
# index, another --node-id: a replacement from a pool) that arrives while it
# runs: the job is full, so the second node waits as a hot spare without
# opening a round (it used to open a grow round that restarted the member's
# ranks only to make itself a spare), keeps waiting past --join-timeout-ms
# (it gave up after the second timeout), and exits 0 when the job is done
# (it waited on for a round that never opens).
if want s; then
Js=run${tag}s
f0=$fails
mkdir -p "$T/js"
"$FTC" redis --job "$Js" --job-dir "$T/js" >"$T/s.redis.out" 2>&1 &
rpid=$!
pids+=($rpid)
for i in $(seq 100); do [ -s "$T/js/redis.url" ] && break; sleep 0.1; done
"$FTC" run --nnodes 1 --node-rank 0 --node-id sa --job "$Js" --job-dir "$T/js" --settle-ms 200 \
    --join-timeout-ms 1500 --grow-wait-ms 0 -- sh -c 'sleep 8' >"$T/s.a.out" 2>&1 &
sa=$!
pids+=($sa)
for i in $(seq 300); do grep -q 'generation 1: rank 0 ' "$T/s.a.out" && break; sleep 0.1; done
"$FTC" run --nnodes 1 --node-rank 0 --node-id sb --job "$Js" --job-dir "$T/js" --settle-ms 200 \
    --join-timeout-ms 1500 --grow-wait-ms 0 -- sh -c 'sleep 8' >"$T/s.b.out" 2>&1 &
sb=$!
pids+=($sb)
wait $sa
rca=$?
check "s: the member finished the job (exit $rca)" test $rca -eq 0
check "s: in its first generation (the spare opened no round)" \
    bash -c "! grep -q 'generation 2' '$T/s.a.out'"
check "s: the second node waited as a hot spare" grep -q 'hot spare' "$T/s.b.out"
for i in $(seq 300); do kill -0 $sb 2>/dev/null || break; sleep 0.1; done
check "s: and ended once the job was done" bash -c "! kill -0 $sb 2>/dev/null"
kill -9 $sb 2>/dev/null
wait $sb
rcb=$?
check "s: with exit 0 ($rcb)" test $rcb -eq 0
# the member is killed (SIGKILL, the whole node): nobody is left to open a
# round, so the spare opens it once the member's heartbeat is gone, and
# finishes the job (generation 1's rank sleeps, a later one's exits 0)
"$FTC" run --nnodes 1 --node-rank 0 --node-id sc --job "$Js" --job-dir "$T/js" --settle-ms 200 \
    --join-timeout-ms 1500 --grow-wait-ms 0 -- sh -c '[ "$FTC_GENERATION" -gt 2 ] || exec sleep 300' \
    >"$T/s.c.out" 2>&1 &
sc=$!
pids+=($sc)
for i in $(seq 300); do grep -q 'generation 2: rank 0 ' "$T/s.c.out" && break; sleep 0.1; done
"$FTC" run --nnodes 1 --node-rank 0 --node-id sd --job "$Js" --job-dir "$T/js" --settle-ms 200 \
    --join-timeout-ms 1500 --grow-wait-ms 0 -- sh -c '[ "$FTC_GENERATION" -gt 2 ] || exec sleep 300' \
    >"$T/s.d.out" 2>&1 &
sd=$!
pids+=($sd)
for i in $(seq 300); do grep -q 'hot spare' "$T/s.d.out" && break; sleep 0.1; done
kill -9 $sc
for i in $(seq 300); do kill -0 $sd 2>/dev/null || break; sleep 0.1; done
kill -9 $sd 2>/dev/null
wait $sd
rcd=$?
check "s: the spare of a job whose only member was killed took over and finished it (exit $rcd)" \
    test $rcd -eq 0
check "s: saying why" grep -q 'no live member: spare sd takes over' "$T/s.d.out"
# --nnodes 2, both members killed: the spare takes over, alone, below MIN:
# it ends with an error after --join-timeout-ms (it waited forever)
Js2=run${tag}t
for n in 0 1; do
    "$FTC" run --nnodes 2 --node-rank $n --node-id "m$n" --job "$Js2" --job-dir "$T/js" \
        --settle-ms 200 --join-timeout-ms 1500 --grow-wait-ms 0 -- sleep 300 \
        >"$T/s.m$n.out" 2>&1 &
    eval "sm$n=\$!"
    pids+=($!)
done
for i in $(seq 300); do grep -q 'generation 1: rank 1 ' "$T"/s.m[01].out && break; sleep 0.1; done
"$FTC" run --nnodes 2 --node-rank 0 --node-id se --job "$Js2" --job-dir "$T/js" --settle-ms 200 \
    --join-timeout-ms 1500 --grow-wait-ms 0 -- sleep 300 >"$T/s.e.out" 2>&1 &
se=$!
pids+=($se)
for i in $(seq 300); do grep -q 'hot spare' "$T/s.e.out" && break; sleep 0.1; done
kill -9 $sm0 $sm1
for i in $(seq 300); do kill -0 $se 2>/dev/null || break; sleep 0.1; done
check "s: a spare left alone below --nnodes MIN ends" bash -c "! kill -0 $se 2>/dev/null"
kill -9 $se 2>/dev/null
wait $se
rce=$?
check "s: with an error naming MIN (exit $rce)" \
    bash -c "[ $rce -eq 1 ] && grep -q 'min_nodes 2' '$T/s.e.out'"
kill "$rpid" 2>/dev/null
wait "$rpid" 2>/dev/null
[ $fails -eq $f0 ] || { echo "--- output of s:"; tail -n 20 "$T"/s.[abcde].out; }
fi

# ---- p. a rank fails while the job's Redis is paused ------------------------------------------
# Redis SIGSTOPped for 12 s and a rank (a binary without libftc: no hang
# detection helps) exits 1 meanwhile: its supervisor cannot open the next
# round then, and must once Redis answers again; generation 2 then runs and
# the job finishes (the request was tried once and lost: that supervisor
# waited in a round nobody opened and gave up, and the other node, its rank
# done, waited for it forever).
if want p; then
Jp=run${tag}u
f0=$fails
"$FTC" run --simulate-nodes 2 --job "$Jp" --job-dir "$T/jp" --max-restarts 2 --settle-ms 300 \
    --join-timeout-ms 20000 -- sh -c 'if [ "$FTC_GENERATION" = 1 ]; then
        if [ "$RANK" = 1 ]; then sleep 1; exit 1; fi; sleep 25; fi; exit 0' >"$T/p.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 600); do [ "$(grep -c 'generation 1: rank [01] ' "$T/p.out")" -ge 2 ] && break; sleep 0.1; done
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/jp/redis.url")
rpid=$(pgrep -f "redis-server 127.0.0.1:$port\$" | head -1)
check "p: found the job's redis-server ($rpid)" test -n "$rpid"
[ -n "$rpid" ] && kill -STOP "$rpid"
sleep 12
[ -n "$rpid" ] && kill -CONT "$rpid"
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
check "p: the job ended" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
rc=$?
check "p: and finished (exit $rc)" test $rc -eq 0
check "p: in generation 2, both nodes" test "$(grep -c 'generation 2: rank [01] ' "$T/p.out")" -eq 2
[ $fails -eq $f0 ] || { echo "--- output of p:"; tail -n 40 "$T/p.out"; }
fi

# ---- l. a node leaves on SIGTERM (a preemption) ----------------------------------------------
# Two simulated nodes (--nnodes 1:2); one node's supervisor gets SIGTERM: it
# stops its rank, leaves cleanly (no node_lost: its heartbeat goes with it)
# and must tell the others: the survivor's rank is restarted alone in
# generation 2 and the job finishes (it used to train on in generation 1 and,
# its rank done, wait forever for the node that had left).
if want l; then
Jl=run${tag}v
f0=$fails
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$Jl" --job-dir "$T/jl" --settle-ms 300 \
    --join-timeout-ms 20000 -- sh -c '[ "$FTC_GENERATION" = 1 ] && sleep 10; exit 0' \
    >"$T/l.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 600); do [ "$(grep -c 'generation 1: rank [01] ' "$T/l.out")" -ge 2 ] && break; sleep 0.1; done
n1=$(cat "$T/jl/node1.pid" 2>/dev/null)
check "l: node 1 runs (pid $n1)" test -n "$n1"
[ -n "$n1" ] && kill -TERM "$n1"
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
check "l: the job ended" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
check "l: node 0 finished it (exit 0)" grep -q 'ftc run: 1 nodes finished, 1 failed' "$T/l.out"
check "l: in generation 2, alone" grep -q '\[node0\] INFO run: generation 2: node 0 of 1' "$T/l.out"
[ $fails -eq $f0 ] || { echo "--- output of l:"; tail -n 30 "$T/l.out"; }
fi

# ---- x. a node that cannot start its ranks gives up, and says so ----------------------------
# Two simulated nodes (--nnodes 1:2, -r3 --log-dir): rank 1's log directory
# cannot be made (a file is in the way), so its node fails to start it and
# exits 1; it opens the next round as it goes, and the other node finishes
# the job alone in generation 2 (it trained on in generation 1 and then
# waited forever for the node that had gone).
if want x; then
Jx=run${tag}w
f0=$fails
mkdir -p "$T/lx/$Jx/attempt_1"
touch "$T/lx/$Jx/attempt_1/1"
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$Jx" --job-dir "$T/jx" --settle-ms 300 \
    --join-timeout-ms 20000 --log-dir "$T/lx" -r3 \
    -- sh -c '[ "$FTC_GENERATION" = 1 ] && sleep 8; exit 0' >"$T/x.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
check "x: the job ended" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
check "x: one node failed (its rank's log directory), the other finished the job" \
    grep -q 'ftc run: 1 nodes finished, 1 failed' "$T/x.out"
check "x: in generation 2, alone" grep -q 'INFO run: generation 2: node 0 of 1' "$T/x.out"
[ $fails -eq $f0 ] || { echo "--- output of x:"; tail -n 30 "$T/x.out"; }
fi

# ---- y. a member gives up after the round closed (a second failure during recovery) -----------
# Two simulated nodes (--nnodes 1:2, --join-timeout-ms 90000); node 1's agent
# cannot start (a directory where its socket goes), so node 1 gives up right
# after the rendezvous and opens the next round as it goes. Node 0, waiting
# for node 1's agent, joins that round at once (it waited out the join
# timeout) and finishes the job alone in generation 2.
if want y; then
Jy=run${tag}y
f0=$fails
mkdir -p "$T/jy/agent.1.sock/x"
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$Jy" --job-dir "$T/jy" --settle-ms 300 \
    --join-timeout-ms 90000 -- sh -c 'exit 0' >"$T/y.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 400); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
check "y: the job ended well before the join timeout" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
check "y: node 1 failed (its agent), node 0 finished the job" \
    grep -q 'ftc run: 1 nodes finished, 1 failed' "$T/y.out"
check "y: in generation 2, alone" grep -q 'INFO run: generation 2: node 0 of 1' "$T/y.out"
[ $fails -eq $f0 ] || { echo "--- output of y:"; tail -n 30 "$T/y.out"; }
fi

# ---- k. a member SIGKILLed after the round closed (its loss ends the wait for it) --------------
# Two simulated nodes (--nnodes 1:2, --join-timeout-ms 120000). In generation
# 1 node 1's rank exits 1; node 0's rank ignores SIGTERM, so node 0 joins the
# round only after --grace-ms. Node 1, registered and waiting, is stopped
# (SIGSTOP): its registration (3 s) outlives its heartbeat (1 s), so the
# round closes with both; then it is killed (SIGKILL). Node 0 waits for node
# 1's agent of generation 2: the loss (node_lost) ends that wait at once, not
# the join timeout: node 0 opens the next round with the loss as its reason
# and finishes alone in generation 3 (the loop's own bound, 60 s, is half
# the join timeout).
if want k; then
Jk=run${tag}k
f0=$fails
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$Jk" --job-dir "$T/jk" --settle-ms 300 \
    --grace-ms 1000 --join-timeout-ms 120000 -- sh -c 'if [ "$FTC_GENERATION" = 1 ]; then
        if [ "$FTC_NODE_RANK" = 1 ]; then sleep 2; exit 1; fi; trap "" TERM; sleep 60; fi; exit 0' \
    >"$T/k.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 600); do grep -q '\[node1\] .*generation 1: phase=stopped' "$T/k.out" && break; sleep 0.05; done
sleep 0.2
n1=$(cat "$T/jk/node1.pid" 2>/dev/null)
check "k: node 1 stopped its rank of generation 1 (pid $n1)" test -n "$n1"
[ -n "$n1" ] && kill -STOP "$n1"
t0=$(date +%s%N)
for i in $(seq 300); do grep -q '\[node0\] INFO run: generation 2: node [01] of 2' "$T/k.out" && break; sleep 0.05; done
check "k: the round closed with both nodes" grep -q '\[node0\] INFO run: generation 2: node [01] of 2' "$T/k.out"
[ -n "$n1" ] && kill -KILL "$n1"
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
echo "k: the job ended $(( ($(date +%s%N) - t0) / 1000000 )) ms after node 1 was stopped (join timeout 120000 ms)"
check "k: the job ended (well before the join timeout)" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
check "k: node 0 gave up waiting for node 1 on its loss" \
    grep -q '\[node0\] WARN run: generation 2: member node1 was lost' "$T/k.out"
check "k: node 0 finished the job alone in generation 3" \
    grep -q '\[node0\] INFO run: generation 3: node 0 of 1' "$T/k.out"
check "k: node 0 finished" grep -q 'ftc run: 1 nodes finished' "$T/k.out"
[ $fails -eq $f0 ] || { echo "--- output of k:"; tail -n 40 "$T/k.out"; }
fi

# ---- h. a rank stopped in its start-up, before it connects ------------------------------------
if want h; then
Jh=run${tag}h
f0=$fails
cat >"$T/h.sh" <<EOF
#!/bin/sh
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$GROUP_RANK" = 1 ]; then
    echo \$\$ >"$T/h.pid"; sleep 2
fi
exec "$RANK" --steps 40 --step-ms 20 --floats 4096 --restore --strict
EOF
chmod +x "$T/h.sh"
"$FTC" run --simulate-nodes 2 --job "$Jh" --job-dir "$T/jh" --max-restarts 2 --settle-ms 300 \
    --grace-ms 1000 --detect-start-ms 3000 -- "$T/h.sh" >"$T/h.out" 2>&1 &
runpid=$!
pids+=($runpid)
for i in $(seq 300); do [ -s "$T/h.pid" ] && break; sleep 0.1; done
victim=$(cat "$T/h.pid" 2>/dev/null)
check "h: node 1's rank started (pid ${victim:-?})" test -n "$victim"
[ -n "$victim" ] && kill -STOP "$victim"
for i in $(seq 600); do grep -q "rank 1 hangs" "$T/h.out" && break; sleep 0.1; done
check "h: the stopped rank was found hung at the start-up limit" grep -q \
    "rank 1 hangs (rank 1 (pid ${victim:-x}) has finished no step .*never connected; start-up limit 3000 ms" \
    "$T/h.out"
check "h: it had not connected" bash -c "! grep -q 'rank 1 (pid ${victim:-x}) connected' '$T/h.out'"
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
kill -9 $runpid 2>/dev/null
wait $runpid
rc=$?
check "h: the job finished (exit $rc)" test $rc -eq 0
check "h: no bad restore, no error" no_errors "" "$T/h.out"
[ $fails -eq $f0 ] || { echo "--- output of h:"; tail -n 40 "$T/h.out"; }
fi

# ---- n. a node SIGKILLed after the round closed, before its agent ran ---------------------------
# Two simulated nodes (--nnodes 2:3, --join-timeout-ms 120000) run generation
# 1; a third supervisor (node2) joins at once (--grow-wait-ms 0: the grow
# round closes with all three, the others' ranks ending on SIGTERM well within
# --settle-ms 3000), runs generation 2 and is killed (SIGKILL): its heartbeat
# expires, a detector reports it (node_lost), generation 3 runs on 2 nodes.
# node2 comes back (a new supervisor) and joins the same way, and is killed
# (SIGKILL) while it pauses before starting its agent (test knob
# FTC_TEST_RUN_AGENT_DELAY_MS). This incarnation never had an agent, so no
# heartbeat of it expires and no detector reports it (they find its previous
# incarnation's member record without a heartbeat: reported already); its
# supervisor's lease (ftc:{J}:sup:node2) expires instead, and that ends the
# survivors' wait for its agent, not the join timeout: they publish its loss,
# one node_lost event whichever of them sees it (same id), so node2 has two,
# one per incarnation; they go on in generation 5 (the loop's own bound, 60
# s, is half the join timeout). node2 comes back once more, paused before
# its agent, with a member record as its agent would have written it on
# joining (this supervisor's pid): a detector reports its missing heartbeat,
# and when it is killed the survivors' report from its lease has the same id
# (node_lost:node2:JOINED_MS): one event for that incarnation, three in all;
# generation 7 finishes. Generations 2..7's ranks wait for $T/n.end, so that
# the events are read while the job's Redis runs.
n_events() { "$FTC" events --json --count 1000 --redis "$(cat "$T/jn/redis.url" 2>/dev/null)" \
    --job "$Jn" 2>/dev/null; }
n_lost() { n_events | grep '"kind":"node_lost"' | grep -c '"node":"node2"'; } # node2's losses
if want n; then
Jn=run${tag}n
f0=$fails
cat >"$T/n.sh" <<EOF
#!/bin/sh
[ "\$FTC_GENERATION" = 1 ] && exec sleep 60
for i in \$(seq 900); do [ -e "$T/n.end" ] && exit 0; sleep 0.1; done
exit 0
EOF
chmod +x "$T/n.sh"
"$FTC" run --simulate-nodes 2 --nnodes 2:3 --job "$Jn" --job-dir "$T/jn" --settle-ms 3000 \
    --grace-ms 1000 --join-timeout-ms 120000 -- "$T/n.sh" >"$T/n.out" 2>&1 &
runpid=$!
pids+=($runpid)
g1='\[node[01]\] INFO run: generation 1: node [01] of 2'
for i in $(seq 600); do grep -q "$g1" "$T/n.out" && break; sleep 0.05; done
check "n: nodes 0 and 1 run generation 1" grep -q "$g1" "$T/n.out"
n_join() { # ENV...: node2 joins (a new supervisor), output in $T/n2.out
    env "$@" "$FTC" run --node-rank 2 --nnodes 2:3 --job "$Jn" --job-dir "$T/jn2" \
        --redis "$(cat "$T/jn/redis.url")" --settle-ms 3000 --grow-wait-ms 0 \
        --join-timeout-ms 120000 -- "$T/n.sh" >"$T/n2.out" 2>&1 &
    newpid=$!
    pids+=($newpid)
}
n_join FTC_N=1 # (no knob)
r2='INFO run: generation 2: rank [0-9]* (local'
for i in $(seq 600); do grep -q "$r2" "$T/n2.out" 2>/dev/null && break; sleep 0.05; done
check "n: node2 ran generation 2 (its agent, its rank)" grep -q "$r2" "$T/n2.out"
kill -KILL $newpid
wait $newpid 2>/dev/null
rm -f /dev/shm/ftc."$Jn".n2.* 2>/dev/null
g3='\[node[01]\] INFO run: generation 3: node [01] of 2'
for i in $(seq 600); do grep -q "$g3" "$T/n.out" && break; sleep 0.1; done
check "n: the others went on in generation 3" grep -q "$g3" "$T/n.out"
nl=$(n_lost)
check "n: its heartbeat's expiry is one node_lost event ($nl)" test "$nl" -eq 1
mv "$T/n2.out" "$T/n2a.out"
n_join FTC_TEST_RUN_AGENT_DELAY_MS=600000
for i in $(seq 600); do
    grep -q 'FTC_TEST_RUN_AGENT_DELAY_MS: pausing' "$T/n2.out" 2>/dev/null && break
    sleep 0.05
done
check "n: node2 is back, node 2 of 3 in generation 4, before its agent" \
    grep -q 'generation 4: node 2 of 3' "$T/n2.out"
# the member record its previous incarnation left, as if that process had had this
# supervisor's pid (a container restarted: the same host, the same pid): still another
# incarnation, whose loss is an event of its own (not the previous one's, published already)
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/jn/redis.url")
pw=$(sed -n 's|redis://:\([^@]*\)@.*|\1|p' "$T/jn/redis.url")
n_cli() { redis-cli --no-auth-warning -p "$port" -a "$pw" "$@"; }
read -r rh rd rp rj <<<"$(n_cli HGET "ftc:{$Jn}:members" node2)"
n_cli HSET "ftc:{$Jn}:members" node2 "$rh $rd $newpid $rj" >/dev/null
check "n: its previous incarnation's member record, with this supervisor's pid (was $rp)" \
    test "$(n_cli HGET "ftc:{$Jn}:members" node2)" = "$rh $rd $newpid $rj"
sleep 1 # (the survivors read its lease meanwhile: its pid)
kill -KILL $newpid
t0=$(date +%s%N)
g5='\[node[01]\] INFO run: generation 5: node [01] of 2'
for i in $(seq 600); do grep -q "$g5" "$T/n.out" && break; sleep 0.1; done
echo "n: generation 5 started $(( ($(date +%s%N) - t0) / 1000000 )) ms after node2 was killed" \
    "before its agent (join timeout 120000 ms)"
check "n: the survivors went on in generation 5 (well before the join timeout)" \
    grep -q "$g5" "$T/n.out"
n_events >"$T/n.events"
nl=$(grep '"kind":"node_lost"' "$T/n.events" | grep -c '"node":"node2"')
check "n: node2's losses are two node_lost events, one per incarnation ($nl)" test "$nl" -eq 2
pre="supervisor lease of node2 expired before its agent's heartbeat began"
check "n: the second says its supervisor's lease expired before its agent's heartbeat began" \
    grep -q "\"kind\":\"node_lost\".*$pre" "$T/n.events"
lease="WARN run: generation 4: member node2 was lost .*supervisor's lease expired"
echo "n: survivors that saw the lease expire: $(count "$lease" "$T/n.out"); published:" \
    "$(count 'node_lost node2 published' "$T/n.out"), found it published:" \
    "$(count 'node_lost node2 (.*) was published already' "$T/n.out")"
# node2 back a third time, paused before its agent; its member record is set as its agent
# would have written it on joining (this supervisor's pid, a new incarnation), so a detector
# reports the missing heartbeat (node_lost:node2:J); killed, its lease expires: the survivors'
# report of this incarnation has the detector's id, no second event
mv "$T/n2.out" "$T/n2b.out"
n_join FTC_TEST_RUN_AGENT_DELAY_MS=600000
for i in $(seq 600); do
    grep -q 'FTC_TEST_RUN_AGENT_DELAY_MS: pausing' "$T/n2.out" 2>/dev/null && break
    sleep 0.05
done
check "n: node2 is back, node 2 of 3 in generation 6, before its agent" \
    grep -q 'generation 6: node 2 of 3' "$T/n2.out"
inc=$(date +%s%3N)
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/jn/redis.url")
pw=$(sed -n 's|redis://:\([^@]*\)@.*|\1|p' "$T/jn/redis.url")
redis-cli --no-auth-warning -p "$port" -a "$pw" HSET "ftc:{$Jn}:members" node2 \
    "vm - $newpid $inc" >/dev/null
check "n: its member record set" test "$(redis-cli --no-auth-warning -p "$port" -a "$pw" \
    HGET "ftc:{$Jn}:members" node2)" = "vm - $newpid $inc"
for i in $(seq 300); do [ "$(n_lost)" -gt "$nl" ] && break; sleep 0.1; done
check "n: a detector reported the joined agent's missing heartbeat ($nl, then $(n_lost) events)" \
    test "$(n_lost)" -eq $((nl + 1))
kill -KILL $newpid
g7='\[node[01]\] INFO run: generation 7: node [01] of 2'
for i in $(seq 600); do grep -q "$g7" "$T/n.out" && break; sleep 0.1; done
check "n: the survivors went on in generation 7" grep -q "$g7" "$T/n.out"
check "n: a survivor saw its lease expire, its loss published already (the detector's id)" \
    grep -q "node_lost node2 (node_lost:node2:$inc) was published already" "$T/n.out"
nl=$(n_lost)
check "n: node2's three incarnations, three node_lost events ($nl)" test "$nl" -eq 3
touch "$T/n.end"
for i in $(seq 600); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
check "n: the job ended" bash -c "! kill -0 $runpid 2>/dev/null"
kill -9 $runpid 2>/dev/null
wait $runpid
check "n: a survivor gave up waiting for node2 on its lease" grep -q "$lease" "$T/n.out"
check "n: both survivors finished the job in generation 7" \
    grep -q 'ftc run: 2 nodes finished' "$T/n.out"
[ $fails -eq $f0 ] || { echo "--- output of n:"; tail -n 40 "$T/n.out"; echo "--- node2:"
    tail -n 20 "$T/n2.out"; echo "--- events:"; cat "$T/n.events"; }
fi

if [ $fails -ne 0 ]; then
    echo "test_run: $fails check(s) failed ($SECONDS s)"
    exit 1
fi
echo "test_run: all checks passed ($SECONDS s)"
