#!/usr/bin/env bash
# test_run_train.sh — the reference trainer (`ftc train`, real DP with ZeRO-1,
# deterministic) under `ftc run --simulate-nodes 4`, checkpointing every step
# through the agents, with real processes, a real embedded Redis and kill -9.
# Each scenario ends with the parameters' hash of a fault-free single-process
# run of the same global batch (I5: bit-identical through an elastic shrink).
#
#   A. a node is killed (supervisor, agent and rank, SIGKILL; its shared
#      memory wiped) at a random committed step: the 3 survivors shrink to
#      DP=3 and re-partition the DP=4 ZeRO-1 chunks through ftc_fetch; the
#      node comes back (a new `ftc run --node-rank I`), the job grows to DP=4
#      again (re-partitioned from DP=3) and finishes;
#   B. a rank is SIGKILLed right after ftc_checkpoint of a step started (its
#      snapshot and replication in flight: FTC_TRAIN_DIE_IN_CKPT): the
#      restore takes a committed step, never the cut one unless it committed
#      (I3); as soon as the survivors' next generation starts (rendezvous
#      done, ranks starting and restoring), a second node is killed: the
#      round restarts with 3 nodes and the job still finishes bit-identically;
#   C. DP=2 x TP=2: `ftc run --simulate-nodes 2 --nnodes 1:2 --nproc-per-node 2
#      -- ftc train ... --tp 2` (each node one TP group: ranks 2d, 2d+1); the
#      node without rank 0 is killed (its shared memory wiped) at a random
#      committed step: the survivor goes on as DP=1 x TP=2 (DP and TP groups
#      rebuilt), each rank re-partitions the DP=2 chunks of its TP slice (the
#      previous ranks of its tp_rank, the lost ones from the survivor's replica
#      store) and, alone, commits without replicas; the final hash equals a
#      fault-free `ftc train --nproc 2 --tp 2` run's (bit-identical across DP
#      at a fixed TP; the single-process reference of A and B is TP=1).
#   D. A in in-process mode (`ftc run --in-process`): the 3 surviving ranks
#      are not restarted — they leave the failed generation, take the new
#      layout from their assignment file and re-partition to DP=3 in the SAME
#      pids; the node comes back and the survivors, told by SIGUSR1 (nothing
#      failed for them) grow to DP=4 in-process again; bit-identical.
#   E. in-process, 2 nodes of 2 ranks: rank 1 dies with a checkpoint in flight
#      (FTC_TRAIN_DIE_IN_CKPT): only it is started again; rank 0 (its node's
#      other rank) and the other node's ranks continue in their pids at the
#      same layout (in-place restore of a committed step, I3); bit-identical.
#
#   F. in-process, 4 nodes: the node of rank 0 is killed (no single point of
#      failure at rank 0), and as soon as a survivor continues into the next
#      generation a second node is killed during that recovery: the round
#      starts again and the two survivors finish as DP=2 in their own
#      processes (--redundancy 2: two losses before a new commit); bit-identical.
#
#   G. no replicas (--redundancy 0), the persist tier every step: a node is
#      lost, the 2 survivors shrink to DP=2 and re-partition with the lost
#      rank's shards from the persist tier — at an older committed step when
#      the tier is behind the newest (every rank goes back to it); bit-identical.
#
# usage: test_run_train.sh PATH/TO/ftc   (FTC_RUN_TRAIN_ONLY=A..G: one or more)
set -u
FTC=${1:?usage: test_run_train.sh FTC}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/runtrain-XXXXXX")
tag=$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -f /dev/shm/ftc.rt"$tag"* 2>/dev/null
    [ -n "${FTC_TEST_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # check, count, committed, wait_committed
wait_grep() { # PATTERN FILE TIMEOUT_S [FROM_LINE]
    local end=$((SECONDS + $3))
    while [ $SECONDS -lt $end ]; do
        tail -n +"${4:-1}" "$2" 2>/dev/null | grep -q -- "$1" && return 0
        sleep 0.05
    done
    return 1
}
dump() { # LABEL FILE...: on a failure, the supervisors' story (every WARN/ERROR and
    # generation line, whole) and the tail of the output
    local label=$1
    shift
    echo "--- $label: warnings, errors and generations:"
    grep -h -v 'is alive' "$@" | grep -E 'WARN|ERROR|INFO run: (generation [0-9]+: (node|layout)|recovery)|took' | cut -c1-400
    echo "--- $label: the last lines:"
    grep -h -v 'is alive' "$@" | tail -60
}
hash_of() { sed -n 's/^params xxh3 \([0-9a-f]*\) after.*/\1/p' "$@" | tail -1; }
want() { case ${FTC_RUN_TRAIN_ONLY:-ABCDEFG} in *$1*) return 0 ;; esac; return 1; }
export FTC_LOG_LEVEL=info OMP_WAIT_POLICY=passive
# the tiny model; a global batch of 12 sequences (12 micro-batches: 3 per
# rank at DP=4, 4 at DP=3), the same whatever the DP degree
STEPS=${FTC_RUN_TRAIN_STEPS:-90}
TRAIN=(train --model tiny --micro-batch 1 --global-batch 12 --seq-len 16 --corpus-bytes 60000
    --eval-batches 1 --threads 1 --log-every 1 --steps "$STEPS")

# ---- the fault-free reference of A and B: one process, deterministic -------------------------
if want A || want B || want D || want E || want F || want G; then
"$FTC" "${TRAIN[@]}" --deterministic >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
check "the fault-free run printed its params hash ($REF)" test -n "$REF"
fi

# ---- A. node lost at a random step: shrink to DP=3, grow back to DP=4 -------------------------
if want A; then
f0=$fails
J=rt${tag}a
kill_at=$((5 + RANDOM % 12))
victim=$((RANDOM % 4))
"$FTC" run --simulate-nodes 4 --nnodes 3:4 --job "$J" --job-dir "$T/ja" --max-restarts 4 \
    --settle-ms 300 -- "$FTC" "${TRAIN[@]}" >"$T/a.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "A: the job committed step $kill_at" wait_committed "$J" "$T/ja" "$kill_at" 90
vpid=$(cat "$T/ja/node$victim.pid" 2>/dev/null)
kill -9 "$vpid"
rm -f /dev/shm/ftc."$J".n"$victim".* 2>/dev/null # the node's memory is gone with it
echo "A: node $victim (pid $vpid) killed after step $kill_at was committed"
check "A: the survivors shrank to 3 nodes" wait_grep "of 3, world 3" "$T/a.out" 60
check "A: the DP=3 ranks re-partitioned the DP=4 checkpoint through the agents" \
    wait_grep "of 3: restored step [1-9][0-9]* through the agent, re-partitioned from 4 DP" \
    "$T/a.out" 60
url=$(cat "$T/ja/redis.url")
"$FTC" run --node-rank "$victim" --nnodes 3:4 --job "$J" --job-dir "$T/ja" --redis "$url" \
    --max-restarts 4 --settle-ms 300 -- "$FTC" "${TRAIN[@]}" >"$T/a2.out" 2>&1 &
back=$!
pids+=($back)
check "A: the returning node joined a 4-node generation" wait_grep "of 4, world 4" "$T/a2.out" 60
wait $runpid
rc=$?
wait $back
rc2=$?
check "A: the simulated job finished (exit $rc)" test $rc -eq 0
check "A: the returning node finished (exit $rc2)" test $rc2 -eq 0
check "A: the DP=4 ranks re-partitioned the DP=3 checkpoint" \
    grep -q "of 4: restored step [1-9][0-9]* through the agent, re-partitioned from 3 DP" \
    "$T/a.out" "$T/a2.out"
check "A: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/a.out' '$T/a2.out'"
H=$(hash_of "$T/a.out" "$T/a2.out")
check "A: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
# the loss fails the generation through the node_lost event, or first
# through a survivor's collective that lost its peer: either way
check "A: the node loss failed the generation" \
    grep -q "failed (node node[0-9] lost (heartbeat\|failed (rank [0-9]* (node node[0-9]) exited" "$T/a.out"
[ $fails -eq $f0 ] || dump A "$T/a.out" "$T/a2.out"
fi

# ---- B. a rank killed mid-checkpoint, then a node killed during the recovery ------------------------
if want B; then
f0=$fails
J=rt${tag}b
die_at=$((5 + RANDOM % 12))
FTC_TRAIN_DIE_IN_CKPT=2:$die_at "$FTC" run --simulate-nodes 4 --nnodes 2:4 --job "$J" \
    --job-dir "$T/jb" --max-restarts 5 --settle-ms 300 -- "$FTC" "${TRAIN[@]}" >"$T/b.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "B: rank 2 died with the checkpoint of step $die_at in flight" \
    wait_grep "rank 2 killed with the checkpoint of step $die_at in flight" "$T/b.out" 90
check "B: the next generation started its ranks" wait_grep "generation 2: rank" "$T/b.out" 60
# the node of rank 0 is spared (the test reads the final hash from it either way)
node0=$(sed -n 's/.*ftc\[node\([0-9]*\)\] INFO run: generation 2: rank 0 .*/\1/p' "$T/b.out" | head -1)
second=$(((${node0:-0} + 1 + RANDOM % 3) % 4))
kill -9 "$(cat "$T/jb/node$second.pid")"
rm -f /dev/shm/ftc."$J".n"$second".* 2>/dev/null
echo "B: node $second killed while generation 2 was starting and restoring"
wait $runpid
rc=$?
check "B: the job finished (exit $rc)" test $rc -eq 0
check "B: the survivors went on with 3 nodes" grep -q "of 3, world 3" "$T/b.out"
# the first restore after the cut checkpoint (later generations may restore later steps)
restored=$(sed -n 's/.*restored step \([0-9]*\) through the agent.*/\1/p' "$T/b.out" | head -1)
echo "B: the restores took step ${restored:-none} (the cut checkpoint was step $die_at)"
check "B: a committed step was restored, not past the cut checkpoint (I3)" \
    test -n "$restored" -a "${restored:-0}" -ge 1 -a "${restored:-99999}" -le "$die_at"
check "B: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/b.out'"
H=$(hash_of "$T/b.out")
check "B: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
[ $fails -eq $f0 ] || dump B "$T/b.out"
fi

# ---- C. DP=2 x TP=2 (2 nodes of 2 ranks, one TP group each) loses a node --------------------
if want C; then
f0=$fails
J=rt${tag}c
CSTEPS=${FTC_RUN_TRAIN_STEPS_C:-40}
TRAINC=(train --model tiny --micro-batch 1 --global-batch 12 --seq-len 16 --corpus-bytes 60000
    --eval-batches 1 --threads 1 --log-every 1 --steps "$CSTEPS" --tp 2)
# the reference: fault-free DP=1 x TP=2 (bit-identical across DP at a fixed TP, not across TP)
"$FTC" "${TRAINC[@]}" --nproc 2 >"$T/cref.out" 2>&1
CREF=$(hash_of "$T/cref.out")
check "C: the fault-free TP=2 run printed its params hash ($CREF)" test -n "$CREF"
kill_at=$((4 + RANDOM % 8))
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --nproc-per-node 2 --job "$J" --job-dir "$T/jc" \
    --max-restarts 4 --settle-ms 2000 -- "$FTC" "${TRAINC[@]}" >"$T/c.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "C: the job committed step $kill_at" wait_committed "$J" "$T/jc" "$kill_at" 90
# the node of rank 0 is spared (the final hash is read from it)
node0=$(sed -n 's/.*ftc\[node\([0-9]*\)\] INFO run: generation [0-9]*: rank 0 .*/\1/p' "$T/c.out" | tail -1)
victim=$((1 - ${node0:-0}))
vpid=$(cat "$T/jc/node$victim.pid" 2>/dev/null)
from=$(($(wc -l <"$T/c.out") + 1))
kill -9 "$vpid"
rm -f /dev/shm/ftc."$J".n"$victim".* 2>/dev/null
echo "C: node $victim (pid $vpid, ranks 2 and 3) killed after step $kill_at was committed"
check "C: the survivor went on alone (DP=1 x TP=2)" wait_grep "node 0 of 1, world 2" "$T/c.out" 60 "$from"
check "C: alone, it commits without replicas (and says so)" \
    wait_grep "is the job's only node: checkpoints commit without replicas" "$T/c.out" 60 "$from"
wait $runpid
rc=$?
check "C: the job finished (exit $rc)" test $rc -eq 0
for tr in 0 1; do
    check "C: TP rank $tr re-partitioned the DP=2 chunks of its slice through the agents" \
        grep -q "DP rank 0 of 1 (TP rank $tr of 2): restored step [1-9][0-9]* through the agent, re-partitioned from 2 DP" "$T/c.out"
done
check "C: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/c.out'"
H=$(hash_of "$T/c.out")
check "C: final params hash $H equals the fault-free TP=2 run's $CREF" test -n "$H" -a "$H" = "$CREF"
[ $fails -eq $f0 ] || dump C "$T/c.out"
fi

# ---- D. A in in-process mode: the survivors shrink and grow back in their own processes -------
if want D; then
f0=$fails
J=rt${tag}d
kill_at=$((5 + RANDOM % 12))
victim=$((RANDOM % 4))
"$FTC" run --simulate-nodes 4 --nnodes 3:4 --in-process --job "$J" --job-dir "$T/jd" \
    --max-restarts 6 --settle-ms 1000 --grace-ms 10000 -- "$FTC" "${TRAIN[@]}" >"$T/d.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "D: the job committed step $kill_at" wait_committed "$J" "$T/jd" "$kill_at" 90
# the pids of the first generation's ranks, by node
declare -A rpid
for n in 0 1 2 3; do
    rpid[$n]=$(sed -n "s/.*ftc\[node$n\] INFO run: generation 1: rank [0-9]* .* is pid \([0-9]*\).*/\1/p" \
        "$T/d.out" | head -1)
done
survivors=" "
for n in 0 1 2 3; do [ $n -ne $victim ] && survivors+="${rpid[$n]} "; done
kill -9 "$(cat "$T/jd/node$victim.pid")"
rm -f /dev/shm/ftc."$J".n"$victim".* 2>/dev/null
echo "D: node $victim killed after step $kill_at was committed; surviving rank pids:$survivors"
check "D: the survivors shrank to 3 nodes" wait_grep "of 3, world 3" "$T/d.out" 60
# (a loaded machine may fail a generation more, through a late heartbeat: the
# survivors then go through it in-process too; generation numbers may vary)
inproc_pids() { # WORLD: the pids that continued in-process into a generation of WORLD ranks
    sed -n "s/.*continuing in-process into generation [0-9]* as rank [0-9]* of $1 (pid \([0-9]*\)).*/\1/p" \
        "$T/d.out" | sort -nu | tr '\n' ' '
}
same_pids() { # WORLD: exactly the 3 survivors continued, in their own pids
    local got=" $(inproc_pids "$1")" want
    want=" $(echo $survivors | tr ' ' '\n' | sort -n | tr '\n' ' ')"
    echo "D: world $1: continued in pids$got(survivors:$want)"
    [ "$got" = "$want" ]
}
wait_pids() { local end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do
    [ "$(inproc_pids "$1" | wc -w)" -ge 3 ] && break; sleep 0.1; done; same_pids "$1"; }
check "D: the 3 survivors continued into DP=3 in their own processes" wait_pids 3
check "D: the DP=3 ranks re-partitioned the DP=4 checkpoint in-process" \
    wait_grep "of 3: restored step [1-9][0-9]* through the agent, re-partitioned from 4 DP" \
    "$T/d.out" 60
url=$(cat "$T/jd/redis.url")
"$FTC" run --node-rank "$victim" --nnodes 3:4 --in-process --job "$J" --job-dir "$T/jd" \
    --redis "$url" --max-restarts 6 --settle-ms 1000 --grace-ms 10000 -- "$FTC" "${TRAIN[@]}" \
    >"$T/d2.out" 2>&1 &
back=$!
pids+=($back)
check "D: the returning node joined a 4-node generation" wait_grep "of 4, world 4" "$T/d2.out" 60
wait $runpid
rc=$?
wait $back
rc2=$?
check "D: the simulated job finished (exit $rc)" test $rc -eq 0
check "D: the returning node finished (exit $rc2)" test $rc2 -eq 0
check "D: the survivors were asked to leave (SIGUSR1) and grew back to DP=4 in-process" \
    same_pids 4
check "D: no rank of a surviving node was started again" bash -c \
    "! grep -q 'INFO run: generation [2-9]: rank [0-9]* (.*) is pid' '$T/d.out'"
check "D: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/d.out' '$T/d2.out'"
H=$(hash_of "$T/d.out" "$T/d2.out")
check "D: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
[ $fails -eq $f0 ] || dump D "$T/d.out" "$T/d2.out"
fi

# ---- E. in-process: a rank dies, only it is started again ------------------------------------
if want E; then
f0=$fails
J=rt${tag}e
die_at=$((5 + RANDOM % 12))
FTC_TRAIN_DIE_IN_CKPT=1:$die_at "$FTC" run --simulate-nodes 2 --nproc-per-node 2 --in-process \
    --job "$J" --job-dir "$T/je" --max-restarts 6 --settle-ms 1000 --grace-ms 10000 \
    -- "$FTC" "${TRAIN[@]}" >"$T/e.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "E: rank 1 died with the checkpoint of step $die_at in flight" \
    wait_grep "rank 1 killed with the checkpoint of step $die_at in flight" "$T/e.out" 90
wait $runpid
rc=$?
check "E: the job finished (exit $rc)" test $rc -eq 0
first=" "
for r in 0 2 3; do
    first+="$(sed -n "s/.*INFO run: generation 1: rank $r (.*) is pid \([0-9]*\).*/\1/p" "$T/e.out" | head -1) "
done
cont=" $(sed -n 's/.*continuing in-process into generation [0-9]* as rank [0-9]* of 4 (pid \([0-9]*\)).*/\1/p' \
    "$T/e.out" | sort -nu | tr '\n' ' ')"
first=" $(echo $first | tr ' ' '\n' | sort -n | tr '\n' ' ')"
fresh=" $(sed -n 's/.*INFO run: generation [2-9]: rank [0-9]* (.*) is pid \([0-9]*\).*/\1/p' "$T/e.out" | tr '\n' ' ')"
echo "E: ranks 0, 2, 3 were pids$first; continued in-process: pids$cont; started again:$fresh"
# (a loaded machine may fail one more generation, through a late heartbeat:
# then the new rank 1 continues in-process too)
subset() { for p in $1; do case "$2" in *" $p "*) ;; *) return 1 ;; esac; done; }
check "E: ranks 0, 2 and 3 continued in their own processes" subset "$first" "$cont"
check "E: no other process continued than those and the new rank 1" subset "$cont" "$first$fresh"
check "E: only rank 1 was started again" test \
    "$(grep -c 'INFO run: generation [2-9]: rank [0-9]* (.*) is pid' "$T/e.out")" -ge 1 -a \
    "$(grep 'INFO run: generation [2-9]: rank [0-9]* (.*) is pid' "$T/e.out" | grep -vc ': rank 1 (')" -eq 0
restored=$(sed -n 's/.*restored step \([0-9]*\) through the agent.*/\1/p' "$T/e.out" | head -1)
check "E: a committed step was restored, not past the cut checkpoint (I3): ${restored:-none}" \
    test -n "$restored" -a "${restored:-0}" -ge 1 -a "${restored:-99999}" -le "$die_at"
check "E: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/e.out'"
H=$(hash_of "$T/e.out")
check "E: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
[ $fails -eq $f0 ] || dump E "$T/e.out"
fi

# ---- F. in-process: rank 0's node lost, then a second node during the recovery -------------
if want F; then
f0=$fails
J=rt${tag}f
kill_at=$((5 + RANDOM % 12))
# two replicas of each shard: the second loss may come before the 3-node
# generation committed anything (its replicas are then still the 4-node ones)
"$FTC" run --simulate-nodes 4 --nnodes 2:4 --in-process --redundancy 2 --job "$J" --job-dir "$T/jf" \
    --max-restarts 6 --settle-ms 1000 --grace-ms 10000 -- "$FTC" "${TRAIN[@]}" >"$T/f.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "F: the job committed step $kill_at" wait_committed "$J" "$T/jf" "$kill_at" 90
# no single point of failure at rank 0: its node goes first
first=$(sed -n 's/.*ftc\[node\([0-9]*\)\] INFO run: generation 1: rank 0 .*/\1/p' "$T/f.out" | head -1)
first=${first:-0}
kill -9 "$(cat "$T/jf/node$first.pid")"
rm -f /dev/shm/ftc."$J".n"$first".* 2>/dev/null
lines=$(wc -l <"$T/f.out")
echo "F: node $first (rank 0's) killed after step $kill_at was committed"
# as soon as a survivor continues into the next generation (restoring and
# re-partitioning in its process), a second node dies
check "F: a survivor began its in-process recovery" \
    wait_grep "continuing in-process into generation" "$T/f.out" 60 "$lines"
second=$(((first + 1 + RANDOM % 3) % 4))
kill -9 "$(cat "$T/jf/node$second.pid")"
rm -f /dev/shm/ftc."$J".n"$second".* 2>/dev/null
echo "F: node $second killed during that recovery"
wait $runpid
rc=$?
check "F: the job finished (exit $rc)" test $rc -eq 0
check "F: the two survivors went on as DP=2" grep -q "of 2, world 2" "$T/f.out"
check "F: with 2 nodes left, redundancy 2 commits with the one replica there is" \
    grep -q "has 2 nodes: checkpoints commit with 1 replica(s) instead of 2" "$T/f.out"
check "F: the survivors continued in-process into the 2-rank generation" \
    grep -q "continuing in-process into generation [0-9]* as rank [0-9]* of 2 " "$T/f.out"
check "F: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not re-partition\|could not read the committed' '$T/f.out'"
H=$(hash_of "$T/f.out")
check "F: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
[ $fails -eq $f0 ] || dump F "$T/f.out"
fi

# ---- G. no replicas, the persist tier only: a node lost, the job shrinks ----------------------
if want G; then
f0=$fails
J=rt${tag}g
kill_at=$((5 + RANDOM % 12))
victim=$((RANDOM % 3))
"$FTC" run --simulate-nodes 3 --nnodes 2:3 --redundancy 0 --persist-dir "$T/pg" \
    --persist-every 1 --job "$J" --job-dir "$T/jg" --max-restarts 4 --settle-ms 300 \
    -- "$FTC" "${TRAIN[@]}" >"$T/g.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "G: the job committed step $kill_at" wait_committed "$J" "$T/jg" "$kill_at" 90
kill -9 "$(cat "$T/jg/node$victim.pid")"
rm -f /dev/shm/ftc."$J".n"$victim".* 2>/dev/null
echo "G: node $victim killed after step $kill_at was committed (no replicas: its shard is on disk)"
wait $runpid
rc=$?
check "G: the job finished (exit $rc)" test $rc -eq 0
check "G: the survivors went on as DP=2" grep -q "of 2, world 2" "$T/g.out"
restored=$(sed -n 's/.*restored step \([0-9]*\) through the agent, re-partitioned.*/\1/p' "$T/g.out" | head -1)
echo "G: the DP=2 ranks restored step ${restored:-none} (the persist tier may be a step behind the commit)"
check "G: the lost rank's shard came from the persist tier" grep -q "from the persist tier" "$T/g.out"
check "G: no restart from step 0, no failed restore" bash -c \
    "! grep -q 'starting at step 0\|could not read the committed' '$T/g.out'"
H=$(hash_of "$T/g.out")
check "G: final params hash $H equals the fault-free run's $REF" test "$H" = "$REF"
[ $fails -eq $f0 ] || dump G "$T/g.out"
fi

if [ $fails -ne 0 ]; then
    echo "test_run_train: $fails check(s) failed"
    exit 1
fi
echo "test_run_train: all checks passed"
