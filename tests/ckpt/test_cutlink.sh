#!/usr/bin/env bash
# test_cutlink.sh — a cut link reaches the replication deadline instead of
# hanging (libfabric's tcp path reports nothing by itself: ENVIRONMENT.md).
#
# Two network namespaces joined by a veth pair (10.123.7.1 <-> 10.123.7.2;
# these addresses exist only inside the namespaces made here), one
# cutlink_node in each, replication over tcp;ofi_rxm bound to the veth
# addresses. The client pauses once 16 MiB of a 256 MiB transfer have moved;
# the link is cut; the client resumes and must end by its deadline:
#
#   A  push, link cut by iptables DROP on both sides (link down if iptables
#      does not work in a namespace), deadline 5 s: FTC_ETIMEDOUT or
#      FTC_EFABRIC within deadline + cancel bound + slack; the receiver holds
#      no replica of the unfinished push.
#   B  push, link down and restored after 2 s, deadline 15 s: either completes
#      (then the receiver's replica verifies and equals the shard) or ends
#      cleanly by its deadline.
#   C  fetch back a replica the peer holds, link cut mid-fetch, deadline 5 s:
#      FTC_ETIMEDOUT or FTC_EFABRIC within the deadline + slack.
#
# Usage: test_cutlink.sh PATH/TO/cutlink_node (CUTLINK_SCENARIOS=AC runs a
# subset). Needs root (CAP_NET_ADMIN);
# exits 77 only when a namespace cannot be created or `ip` is missing. Every
# wait is bounded; namespaces, veths, files and shm slots go away in a trap.
set -u

NODE=${1:?usage: test_cutlink.sh PATH/TO/cutlink_node}
SELF=$$
NS_A=ftcA-$SELF
NS_B=ftcB-$SELF
VETH_A=clA$SELF
VETH_B=clB$SELF
IP_A=10.123.7.1
IP_B=10.123.7.2
SLACK_MS=5000      # beyond deadline + the fabric's 1 s cancel bound
CANCEL_MS=1000
FAILS=0
KNOWN=0
SCENARIOS=${CUTLINK_SCENARIOS:-ABC}
PIDS=()
TMP=
NS_MADE=()

# Sanitizer builds: leaks are checked; known third-party ones are suppressed.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:protect_shadow_gap=0}
if [ -z "${LSAN_OPTIONS:-}" ] && [ -n "${FTC_SOURCE_DIR:-}" ] &&
   [ -f "$FTC_SOURCE_DIR/tests/lsan.supp" ]; then
    export LSAN_OPTIONS=suppressions=$FTC_SOURCE_DIR/tests/lsan.supp
fi

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    for p in "${NS_MADE[@]}"; do
        ip netns del "$p" 2>/dev/null   # takes its veth end (and the pair) with it
    done
    ip link del "$VETH_A" 2>/dev/null
    ip link del "$VETH_B" 2>/dev/null
    rm -f /dev/shm/ftc.cl"$SELF"-* 2>/dev/null
    [ -n "$TMP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "test_cutlink: interrupted"; exit 1' INT TERM HUP

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
command -v timeout >/dev/null 2>&1 || { echo "FAIL: timeout (coreutils) missing"; exit 1; }
[ -x "$NODE" ] || { echo "FAIL: $NODE is not an executable"; exit 1; }

if ! ip netns add "$NS_A" 2>/dev/null; then
    skip "cannot create a network namespace (needs root / CAP_NET_ADMIN)"
fi
NS_MADE+=("$NS_A")
ip netns add "$NS_B" || { echo "FAIL: second namespace"; exit 1; }
NS_MADE+=("$NS_B")

setup_net() {
    ip -n "$NS_A" link add "$VETH_A" type veth peer name "$VETH_B" netns "$NS_B" &&
    ip -n "$NS_A" addr add "$IP_A/24" dev "$VETH_A" &&
    ip -n "$NS_B" addr add "$IP_B/24" dev "$VETH_B" &&
    ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
    ip -n "$NS_A" link set "$VETH_A" up && ip -n "$NS_B" link set "$VETH_B" up
}
setup_net || { echo "FAIL: cannot set up the veth pair between $NS_A and $NS_B"; exit 1; }

TMP=$(mktemp -d "${FTC_TEST_TMP:-/tmp}/cutlink.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }

# How scenario A cuts: iptables DROP when it works inside a namespace.
DROP_OK=0
if command -v iptables >/dev/null 2>&1 &&
   ip netns exec "$NS_A" iptables -S INPUT >/dev/null 2>&1 &&
   ip netns exec "$NS_B" iptables -S INPUT >/dev/null 2>&1; then
    DROP_OK=1
fi

cut_link() { # drop|down
    if [ "$1" = drop ]; then
        ip netns exec "$NS_A" iptables -A INPUT -i "$VETH_A" -j DROP &&
        ip netns exec "$NS_B" iptables -A INPUT -i "$VETH_B" -j DROP
    else
        ip -n "$NS_A" link set "$VETH_A" down
    fi
}
restore_link() {
    if [ "$DROP_OK" = 1 ]; then
        ip netns exec "$NS_A" iptables -F INPUT 2>/dev/null
        ip netns exec "$NS_B" iptables -F INPUT 2>/dev/null
    fi
    ip -n "$NS_A" link set "$VETH_A" up
    ip -n "$NS_B" link set "$VETH_B" up
}

# wait_pid PID SECONDS: the exit status, or 255 after killing it at the limit.
wait_pid() {
    local pid=$1 end=$(( $(now_ms) + $2 * 1000 ))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$(now_ms)" -ge "$end" ]; then
            kill -KILL "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            return 255
        fi
        sleep 0.05
    done
    wait "$pid"
}

# field LINE KEY: the value of " KEY=" in a CUTLINK line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# scenario NAME ROLE DEADLINE_MS CUT(drop|down) RESTORE_AFTER_S(0: no)
# Sets OUT_CLIENT / OUT_SERVE to the two CUTLINK lines; returns 1 on a
# failure already reported.
scenario() {
    local name=$1 role=$2 deadline=$3 cut=$4 restore=$5
    local dir=$TMP/$name job=cl$SELF-$name
    mkdir -p "$dir"
    OUT_CLIENT= OUT_SERVE= CLOSE_MS=
    ip netns exec "$NS_B" timeout -k 5 170 "$NODE" serve "$dir" "$IP_B" --job "$job" \
        --max-s 160 >"$dir/serve.out" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    ip netns exec "$NS_A" timeout -k 5 $(( deadline / 1000 + 100 )) "$NODE" "$role" "$dir" \
        "$IP_A" --job "$job" --deadline-ms "$deadline" --mark-mib 16 \
        >"$dir/client.out" 2>&1 &
    local cpid=$!
    PIDS+=("$cpid")

    local end=$(( $(now_ms) + 90000 )) ok=0
    while [ "$(now_ms)" -lt "$end" ]; do
        if [ -e "$dir/started" ]; then ok=1; break; fi
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.01
    done
    if [ "$ok" != 1 ]; then
        fail "$name: the transfer did not start (client output follows)"
        cat "$dir/client.out" "$dir/serve.out"
        kill -KILL "$cpid" "$spid" 2>/dev/null
        wait "$cpid" "$spid" 2>/dev/null
        return 1
    fi
    local t_cut0
    t_cut0=$(now_ms)
    cut_link "$cut" || { fail "$name: cutting the link ($cut) failed"; restore_link; }
    touch "$dir/cut"
    echo "# $name: link cut ($cut) in $(( $(now_ms) - t_cut0 )) ms"
    if [ "$restore" -gt 0 ]; then
        sleep "$restore"
        restore_link
    fi
    wait_pid "$cpid" $(( deadline / 1000 + 110 ))
    local crc=$?
    restore_link
    touch "$dir/stop"
    wait_pid "$spid" 60
    local src=$?
    sed 's/^/# client: /' "$dir/client.out"
    sed 's/^/# server: /' "$dir/serve.out"
    OUT_CLIENT=$(grep -m1 "^CUTLINK op=$role " "$dir/client.out")
    OUT_SERVE=$(grep -m1 '^CUTLINK op=serve ' "$dir/serve.out")
    if [ "$crc" = 124 ] || [ "$crc" = 137 ] || [ "$crc" = 255 ] || [ "$crc" = 3 ]; then
        fail "$name: the client hung (exit $crc): the cut did not reach the deadline"
        return 1
    fi
    [ -n "$OUT_SERVE" ] ||
        { fail "$name: no outcome line from the server (exit $src; 124, 137, 255: it hung)"; return 1; }
    [ -n "$OUT_CLIENT" ] || { fail "$name: no outcome line from the client (exit $crc)"; return 1; }
    closed_ok "$name" client "$crc" "$dir/client.out" "$role" "$OUT_CLIENT" || return 1
    CLOSE_MS=$CLOSED_MS
    closed_ok "$name" server "$src" "$dir/serve.out" serve "$OUT_SERVE" || return 1
    return 0
}

# closed_ok NAME WHO EXIT FILE ROLE OUTCOME: the process reported its outcome;
# did it then close its endpoint and exit 0? Sets CLOSED_MS.
#
# Known: when libfabric 1.17's rxm could not cancel receives in progress (a
# rendezvous cut mid-way), the endpoint is broken and fi_close of it
# dereferences NULL (SIGSEGV inside ftc_fabric_close; docs/fabric.md, "Cut
# links"). Tolerated, loudly, for an endpoint that reported itself broken,
# unless CUTLINK_STRICT_CLOSE=1; any other failure to close fails the test.
closed_ok() {
    local name=$1 who=$2 rc=$3 file=$4 role=$5 outcome=$6 closed
    closed=$(grep -m1 "^CUTLINK_CLOSED op=$role " "$file")
    CLOSED_MS=$(field "$closed" close_ms)
    if [ "$rc" = 0 ] && [ -n "$closed" ]; then
        return 0
    fi
    if [ "$(field "$outcome" health)" = FTC_EFABRIC ] && [ "${CUTLINK_STRICT_CLOSE:-0}" != 1 ] &&
       grep -q "terminated with signal 11\|SEGV" "$file"; then
        echo "# $name: KNOWN ISSUE: the $who crashed (SIGSEGV in libfabric) closing its broken endpoint after reporting its outcome; see docs/fabric.md, Cut links"
        KNOWN=$((KNOWN + 1))
        CLOSED_MS=crashed
        return 0
    fi
    fail "$name: the $who did not close its endpoint cleanly (exit $rc)"
    return 1
}

# check_timeout NAME DEADLINE_MS: the client ended with a timeout or a broken
# endpoint, within deadline + cancel bound + slack.
check_timeout() {
    local name=$1 deadline=$2
    local rc ms after
    rc=$(field "$OUT_CLIENT" rc)
    ms=$(field "$OUT_CLIENT" ms)
    after=$(field "$OUT_CLIENT" after_cut_ms)
    case "$rc" in
        FTC_ETIMEDOUT|FTC_EFABRIC) ;;
        *) fail "$name: expected FTC_ETIMEDOUT or FTC_EFABRIC, got '$rc'"; return ;;
    esac
    if ! [[ "$ms" =~ ^[0-9]+$ ]]; then
        fail "$name: no elapsed time in: $OUT_CLIENT"
        return
    fi
    if [ "$ms" -ge $(( deadline + CANCEL_MS + SLACK_MS )) ]; then
        fail "$name: ended after $ms ms, deadline $deadline ms (+${CANCEL_MS} cancel +${SLACK_MS} slack)"
        return
    fi
    if [ "$ms" -lt $(( deadline - 50 )) ]; then
        fail "$name: ended after $ms ms, before its deadline of $deadline ms"
        return
    fi
    if ! [[ "$after" =~ ^[0-9]+$ ]] || [ "$after" -lt 1000 ]; then
        fail "$name: the link was cut only $after ms before the end: the run was too slow to show anything (machine overloaded?)"
        return
    fi
    echo "# $name: $rc after $ms ms (deadline $deadline ms; $after ms after the cut); close ${CLOSE_MS} ms"
}

# ---- A: iptables DROP (or link down) mid-push, deadline 5 s ----------------------
A_CUT=down
[ "$DROP_OK" = 1 ] && A_CUT=drop
[[ $SCENARIOS == *A* ]] && echo "# A: push 256 MiB $IP_A -> $IP_B, cut by $([ $A_CUT = drop ] && echo 'iptables DROP' || echo 'link down (iptables unusable in a namespace)') after 16 MiB, deadline 5 s"
[[ $SCENARIOS == *A* ]] && if scenario A push 5000 "$A_CUT" 0; then
    check_timeout A 5000
    [ "$(field "$OUT_SERVE" held)" = 0 ] ||
        fail "A: the receiver holds a replica of a push that never finished: $OUT_SERVE"
fi

# ---- B: link down, restored after 2 s, deadline 15 s ------------------------------
[[ $SCENARIOS == *B* ]] && echo "# B: push 256 MiB, link down after 16 MiB and up again after 2 s, deadline 15 s"
[[ $SCENARIOS == *B* ]] && if scenario B push 15000 down 2; then
    rc=$(field "$OUT_CLIENT" rc)
    if [ "$rc" = 0 ]; then
        if [ "$(field "$OUT_CLIENT" match)" = 1 ] && [ "$(field "$OUT_SERVE" held)" = 1 ] &&
           [ "$(field "$OUT_SERVE" match)" = 1 ]; then
            echo "# B: completed after $(field "$OUT_CLIENT" ms) ms ($(field "$OUT_CLIENT" after_cut_ms) ms after the cut); the replica verifies and equals the shard"
        else
            fail "B: completed but the replica does not verify: $OUT_CLIENT / $OUT_SERVE"
        fi
    else
        check_timeout B 15000
    fi
fi

# ---- C: fetch from a peer behind a cut link, deadline 5 s -------------------------
C_CUT=down
[ "$DROP_OK" = 1 ] && C_CUT=drop
[[ $SCENARIOS == *C* ]] && echo "# C: fetch 256 MiB back from $IP_B, cut by $C_CUT after 16 MiB, deadline 5 s"
[[ $SCENARIOS == *C* ]] && if scenario C fetch 5000 "$C_CUT" 0; then
    check_timeout C 5000
    [ "$(field "$OUT_SERVE" held)" = 1 ] ||
        fail "C: the server lost the replica it held: $OUT_SERVE"
fi

if [ "$FAILS" -gt 0 ]; then
    echo "test_cutlink: $FAILS failure(s)"
    exit 1
fi
[ "$KNOWN" -gt 0 ] && echo "test_cutlink: $KNOWN known libfabric close crash(es) tolerated (CUTLINK_STRICT_CLOSE=1 fails them)"
echo "test_cutlink: all scenarios passed"
exit 0
