#!/usr/bin/env bash
# test_run_netns.sh — `ftc run --simulate-nodes 3 --netns`: three node
# supervisors, each (with its agent and its ranks) in a network namespace of
# its own on a private bridge, and a real network fault: one node's link is
# set down mid-run. Real embedded Redis (listening on the bridge too), real
# agents on tcp;ofi_rxm endpoints bound to the namespaces' addresses, real
# ranks (tests/ckpt/rank_main checks every restore byte for byte).
#
#   - each supervisor runs in the namespace JOB_DIR/netns names for it, and
#     its fabric endpoint listens on that namespace's address (not loopback);
#   - node 2's veth flaps (down for 1 s, then up) under a heartbeat TTL of
#     4 s (--detect-ttl-ms): no node is lost, no new generation, and the
#     job commits on (replication to and from node 2 resumed);
#   - node 1's veth is set down after a committed step: its heartbeat
#     expires, the survivors see node_lost, shrink to 2 nodes, restore the
#     committed step and finish; no restore is bad;
#   - the cut node gives up by itself (it lost Redis: "cut off");
#   - when ftc run has exited, its namespaces, veths and bridge are gone.
#
# Needs root and iproute2: exits 77 otherwise. Every wait is bounded; the
# trap kills what is left (also processes still inside the namespaces).
#
# usage: test_run_netns.sh PATH/TO/ftc PATH/TO/rank_main
set -u
FTC=${1:?usage: test_run_netns.sh FTC RANK_MAIN}
RANK=${2:?usage: test_run_netns.sh FTC RANK_MAIN}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root: --netns needs CAP_NET_ADMIN"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
probe=ftcprobe-$$
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here"
ip netns del "$probe"

BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/runns-XXXXXX")
tag=$$
J=runns${tag}
runpid=
fails=0
cleanup() {
    [ -n "$runpid" ] && kill -9 "$runpid" 2>/dev/null
    # what ftc run's watchdog did not remove (it should have)
    if [ -f "$T/netns.copy" ]; then
        while read -r _ _ _ ns _ veth _ _; do
            [ -n "$ns" ] || continue
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
            ip netns del "$ns" 2>/dev/null
            ip link del "$veth" 2>/dev/null
        done < <(grep '^node ' "$T/netns.copy")
        br=$(sed -n 's/^bridge \([^ ]*\) .*/\1/p' "$T/netns.copy")
        [ -n "$br" ] && ip link del "$br" 2>/dev/null
    fi
    wait 2>/dev/null
    rm -f /dev/shm/ftc."$J"* 2>/dev/null
    [ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
trap 'echo "test_run_netns: interrupted"; exit 1' INT TERM HUP
. "$(dirname "$0")/lib.sh" # check, count, committed, wait_committed
wait_for() { # wait_for TIMEOUT_S COMMAND...: until COMMAND succeeds
    local end=$((SECONDS + $1))
    shift
    while [ $SECONDS -lt $end ]; do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}
committed_ge() { local c; c=$(committed "$J" "$T/j"); [ -n "$c" ] && [ "$c" -ge "$1" ]; }
export FTC_LOG_LEVEL=${FTC_LOG_LEVEL:-info}
# a replication to the cut node gives up after 3 s, not 30
export FTC_AGENT_TIMEOUT_MS=3000

# --netns without --simulate-nodes: a usage error, nothing made
"$FTC" run --netns --job "${J}x" --job-dir "$T/x" -- "$RANK" --steps 1 >"$T/usage.out" 2>&1
rc=$?
check "--netns without --simulate-nodes is refused (exit $rc)" \
    bash -c "[ $rc = 2 ] && grep -q -- '--netns needs --simulate-nodes' '$T/usage.out'"

"$FTC" run --simulate-nodes 3 --nnodes 2:3 --netns --job "$J" --job-dir "$T/j" --max-restarts 4 \
    --settle-ms 500 --join-timeout-ms 15000 --detect-ttl-ms 4000 \
    -- "$RANK" --steps 150 --step-ms 40 --floats 4096 \
    --restore --strict >"$T/run.out" 2>&1 &
runpid=$!
check "JOB_DIR/netns lists the namespaces" wait_for 30 test -s "$T/j/netns"
cp "$T/j/netns" "$T/netns.copy" 2>/dev/null
sed 's/^/# /' "$T/netns.copy"
check "the job committed step 5" wait_for 60 committed_ge 5

# each supervisor in its own namespace; its endpoint on that namespace's address
seen=""
for i in 0 1 2; do
    pid=$(cat "$T/j/node$i.pid" 2>/dev/null)
    ns=$(awk -v i="$i" '$1 == "node" && $2 == i {print $4}' "$T/netns.copy")
    addr=$(awk -v i="$i" '$1 == "node" && $2 == i {print $8}' "$T/netns.copy")
    got=$(ip netns identify "$pid" 2>/dev/null)
    check "node $i (pid $pid) runs in namespace $ns (ip netns identify: '$got')" \
        test -n "$ns" -a "$got" = "$ns"
    check "node $i has an endpoint listening on $addr inside $ns" \
        bash -c "ip netns exec '$ns' ss -Htln | grep -q ' $addr:[0-9]'"
    case " $seen " in *" $addr "*) check "node $i's address $addr is its own" false ;; esac
    seen="$seen $addr"
done

# a flap: node 2's link down for 1 s, shorter than the TTL
veth2=$(awk '$1 == "node" && $2 == 2 {print $6}' "$T/netns.copy")
check "node 2's veth $veth2 is named" test -n "$veth2"
ip link set "$veth2" down
sleep 1
ip link set "$veth2" up
cf=$(committed "$J" "$T/j")
echo "# flapped node 2's link ($veth2 down for 1 s), committed step $cf after it"
check "the job committed on after the flap (step $((cf + 10)))" wait_for 40 committed_ge $((cf + 10))
check "no node was lost over the flap, no new generation" \
    bash -c "! grep -q 'lost (heartbeat\|of 2, world 2' '$T/run.out'"

# the fault: node 1's link goes down
veth=$(awk '$1 == "node" && $2 == 1 {print $6}' "$T/netns.copy")
check "node 1's veth $veth is named" test -n "$veth"
c0=$(committed "$J" "$T/j")
ip link set "$veth" down
echo "# cut node 1's link ($veth down) at committed step $c0"
check "the survivors shrank to 2 nodes" wait_for 40 grep -q 'of 2, world 2' "$T/run.out"

end=$((SECONDS + 90))
while kill -0 "$runpid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
if kill -0 "$runpid" 2>/dev/null; then
    check "ftc run ended within 90 s of the cut" false
    kill -9 "$runpid"
fi
wait "$runpid"
rc=$?
runpid=
check "ftc run finished the job after the cut (exit $rc)" test $rc -eq 0
check "the cut was detected as a node loss" grep -q "failed (node node1 lost (heartbeat" "$T/run.out"
check "ranks restored committed state after the loss ($(count 'RESTORED [0-9]* OK' "$T/run.out"))" \
    test "$(count 'RESTORED [0-9]* OK' "$T/run.out")" -ge 2
check "no bad restore, no error" bash -c "! grep -q 'RESTORED [0-9]* BAD\|^ERROR' '$T/run.out'"
check "both survivors' ranks reached the last step" test "$(count 'COMMITTED 149' "$T/run.out")" -ge 2
check "the cut node gave up by itself" grep -q "node 1 was cut off from the job's Redis" "$T/run.out"
check "node 2 (the flap) was never declared lost" bash -c "! grep -q 'node node2 lost' '$T/run.out'"

# everything made is gone
left=""
while read -r _ _ _ ns _ veth _ _; do
    ip netns list | grep -q "^$ns\b" && left="$left ns:$ns"
    ip link show "$veth" >/dev/null 2>&1 && left="$left link:$veth"
done < <(grep '^node ' "$T/netns.copy")
br=$(sed -n 's/^bridge \([^ ]*\) .*/\1/p' "$T/netns.copy")
ip link show "$br" >/dev/null 2>&1 && left="$left bridge:$br"
check "namespaces, veths and the bridge were removed${left:+ (left:$left)}" test -z "$left"

if [ $fails -ne 0 ]; then
    echo "--- output:"
    grep -v 'CHECKPOINTED\|^COMMITTED' "$T/run.out" | tail -80
    echo "test_run_netns: $fails failure(s)"
    exit 1
fi
echo "test_run_netns: all checks passed"
