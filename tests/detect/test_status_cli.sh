#!/usr/bin/env bash
# test_status_cli.sh — `ftc redis`, `status`, `events` and `clean` end to end:
# an embedded Redis started by `ftc redis`, two real agent processes, one
# killed with SIGKILL; status shows members, leader and heartbeats (table and
# JSON), events shows the node loss exactly once, and a bad --redis gets a
# clear error; events --follow across a Redis stopped (SIGSTOP) until the
# client and the agent both noticed; an event stream key of another type;
# `ftc clean` refusing a live job and removing a dead one's keys.
# No fixed sleeps: every wait polls for the state it expects, with a deadline
# (WAIT_S) far above what it takes on a loaded machine, and a wait that runs
# out is a failed check, not a silent fall-through.
#
# usage: test_status_cli.sh PATH/TO/ftc PATH/TO/det_agent
set -u
FTC=${1:?usage: test_status_cli.sh FTC DET_AGENT}
AGENT=${2:?usage: test_status_cli.sh FTC DET_AGENT}
PY=${FTC_PYTHON:-python3}
[ -x "$PY" ] || PY=python3
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/status-XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
n=0
WAIT_S=${FTC_TEST_WAIT_S:-60}
wait_for() { # wait_for COMMAND...: until it succeeds (0), or WAIT_S seconds passed (1)
    local end=$((SECONDS + WAIT_S))
    until "$@"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}
status_has() { "$FTC" status "${J[@]}" 2>/dev/null | grep -Eq "$1"; } # status_has REGEX
count_at_least() { test "$(grep -c -- "$1" "$3" 2>/dev/null)" -ge "$2"; } # PATTERN N FILE
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    n=$((n + 1))
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
J=(--job st --job-dir "$T/job")
events_have() { # events_have REGEX: ftc events lists it (kept in $T/events.txt)
    "$FTC" events "${J[@]}" >"$T/events.txt" 2>&1 && grep -Eq "$1" "$T/events.txt"
}

"$FTC" redis "${J[@]}" >"$T/redis.out" 2>&1 &
pids+=($!)
check "ftc redis wrote the address file" wait_for test -s "$T/job/redis.url"
check "the address file is private" test "$(stat -c %a "$T/job/redis.url")" = 600
check "ftc redis refuses a second server for the job" \
    bash -c "! '$FTC' redis --job st --job-dir '$T/job' >/dev/null 2>&1"

"$AGENT" "$T/job/redis.url" st A >"$T/A.out" 2>&1 &
pids+=($!)
apid=$!
check "A took the lease" wait_for status_has "^leader A:"
"$AGENT" "$T/job/redis.url" st B >"$T/B.out" 2>&1 &
pids+=($!)
bpid=$!
check "B started" wait_for grep -q READY "$T/B.out"
# B's first heartbeat is written after READY: wait until status shows it
check "B's heartbeat shows" wait_for status_has "^B .*alive"

"$FTC" status "${J[@]}" >"$T/status.txt" 2>&1
check "status exits 0" test $? -eq 0
check "status lists both members alive" bash -c "grep -E '^A .*alive' '$T/status.txt' >/dev/null && grep -E '^B .*alive' '$T/status.txt' >/dev/null"
check "status names the leader" grep -q "^leader A:" "$T/status.txt"
"$FTC" status "${J[@]}" --json >"$T/status.json" 2>&1
check "status --json parses and has two alive members" "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["job"] == "st" and len(d["members"]) == 2, d
assert all(m["alive"] for m in d["members"]), d
assert d["leader"].startswith("A:"), d' "$T/status.json"

kill -9 "$apid"
wait "$apid" 2>/dev/null
check "events shows the node loss" wait_for events_have "node_lost .*node=A"
# counted once B has also taken A's lease (it expires after the loss is
# seen): a second report of the loss would be there by then
check "B took over the lease" wait_for status_has "^leader B:"
"$FTC" events "${J[@]}" >"$T/events.txt" 2>&1
check "the node loss is one event" test "$(grep -c 'node_lost .*node=A' "$T/events.txt")" -eq 1
"$FTC" events "${J[@]}" --json >"$T/events.json" 2>&1
check "events --json: one JSON object per line, the loss among them" \
    "$PY" -c "import json,sys; ev=[json.loads(l) for l in open(sys.argv[1])]; \
assert ev and all(set(e) >= {'id','kind','node','rank','generation','step','t_detect_ms','detail'} for e in ev); \
assert sum(1 for e in ev if e['kind'] == 'node_lost' and e['node'] == 'A') == 1" "$T/events.json"

"$FTC" events "${J[@]}" --follow >"$T/follow.txt" 2>&1 &
fpid=$!
pids+=($fpid)
check "events --follow printed the history" wait_for grep -q "node_lost" "$T/follow.txt"
kill -TERM "$fpid"
wait "$fpid"
rc=$?
check "events --follow ends cleanly on SIGTERM (exit $rc)" test $rc -eq 0
"$FTC" status "${J[@]}" --watch --interval 200 >"$T/watch.txt" 2>&1 &
wpid=$!
pids+=($wpid)
check "status --watch redraws" wait_for count_at_least '^job st' 2 "$T/watch.txt"
kill -TERM "$wpid"
wait "$wpid"
rc=$?
check "status --watch ends cleanly on SIGTERM (exit $rc)" test $rc -eq 0

# events --follow while Redis is stopped (SIGSTOP) until both it and agent B
# noticed (their commands timed out): it says so once, not every retry, and
# goes on printing once Redis answers (B's redis_gap)
rpid=$(sed -n 's/.*embedded redis-server pid \([0-9]*\).*/\1/p' "$T/redis.out" | head -1)
check "ftc redis named its redis-server pid" test -n "$rpid"
"$FTC" events "${J[@]}" --follow >"$T/follow2.txt" 2>"$T/follow2.err" &
fpid=$!
pids+=($fpid)
# in its follow loop once it printed the history (flushed after its last
# read of the start; else the stop hits its start)
check "events --follow started" wait_for grep -q "node_lost" "$T/follow2.txt"
kill -STOP "$rpid"
check "events --follow saw Redis go away" wait_for grep -q "retrying" "$T/follow2.err"
check "B saw Redis go away" wait_for grep -q "redis unreachable" "$T/B.out"
kill -CONT "$rpid"
check "events --follow printed the event after Redis came back" \
    wait_for grep -q "redis_gap" "$T/follow2.txt"
check "and that it answers again" wait_for grep -q "answers again" "$T/follow2.err"
kill -TERM "$fpid"
wait "$fpid"
check "events --follow said once that Redis was away ($(grep -c retrying "$T/follow2.err") lines)" \
    test "$(grep -c retrying "$T/follow2.err")" -eq 1

# a job whose event stream key holds a string (garbage): ftc events fails
# naming it, not an empty listing with exit 0; status shows it as a problem
port=$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/job/redis.url")
pw=$(sed -n 's|redis://:\([^@]*\)@.*|\1|p' "$T/job/redis.url")
redis-cli --no-auth-warning -p "$port" -a "$pw" SET 'ftc:{stx}:events' garbage >/dev/null
"$FTC" events --job stx --redis "$(cat "$T/job/redis.url")" >"$T/evx.txt" 2>&1
rc=$?
check "events on a stream key of another type fails (exit $rc)" test $rc -eq 1
check "and names the key" grep -q "ftc:{stx}:events.*WRONGTYPE\|WRONGTYPE.*ftc:{stx}:events" "$T/evx.txt"
"$FTC" status --job stx --redis "$(cat "$T/job/redis.url")" >"$T/stx.txt" 2>&1
check "status shows it as a problem" grep -q "^PROBLEMS: .*WRONGTYPE" "$T/stx.txt"

# ftc clean: refuses while the job looks alive (B's heartbeat and lease; a supervisor lease),
# naming what it found and saying what to do, removing nothing; removes every key of a dead
# job and only those (not another job's, even one whose id begins with the same letters)
rcli() { redis-cli --no-auth-warning -p "$port" -a "$pw" "$@"; }
nkeys() { rcli --scan --pattern "$1" | wc -l; } # nkeys PATTERN
rcli SET 'ftc:{s}:members' keep >/dev/null
rcli SET 'ftc:{st2}:members' keep >/dev/null
st_before=$(nkeys 'ftc:{st}:*')
"$FTC" clean "${J[@]}" >"$T/clean.txt" 2>&1
rc=$?
check "clean of a live job is refused (exit $rc)" test $rc -eq 1
check "and names B's heartbeat and lease" grep -q \
    "^ftc clean: job st looks alive: heartbeat of B; leader lease held by B:" "$T/clean.txt"
check "and says to stop the job first or use --force" grep -q "stop the job first.*--force" \
    "$T/clean.txt"
check "and removes nothing ($st_before keys before)" test "$(nkeys 'ftc:{st}:*')" -ge "$st_before"
rcli SET 'ftc:{stx}:sup:S' "h 1 2" PX 60000 >/dev/null
"$FTC" clean --job stx --redis "$(cat "$T/job/redis.url")" >"$T/cleanx.txt" 2>&1
rc=$?
check "clean is refused while a supervisor lease exists (exit $rc)" test $rc -eq 1
check "and names it" grep -q "looks alive: supervisor lease of S;" "$T/cleanx.txt"
"$FTC" clean --job stx --redis "$(cat "$T/job/redis.url")" --force >"$T/cleanx.txt" 2>&1
rc=$?
check "clean --force removes it anyway (exit $rc)" test $rc -eq 0
check "and says how many keys it removed" grep -qx "removed 2 keys of job stx" "$T/cleanx.txt"
check "none of stx is left" test "$(nkeys 'ftc:{stx}:*')" -eq 0
check "st's keys are all there" test "$(nkeys 'ftc:{st}:*')" -ge "$st_before"

kill -9 "$bpid"
wait "$bpid" 2>/dev/null
clean_ok() { "$FTC" clean "${J[@]}" >"$T/clean.txt" 2>&1; }
# B's heartbeat and lease expire (a TTL of 1 s and 2 s): then the clean goes through
check "clean of the job once B is gone" wait_for clean_ok
check "it says how many keys it removed" grep -Eqx "removed [1-9][0-9]* keys of job st" \
    "$T/clean.txt"
check "no key of st is left" test "$(nkeys 'ftc:{st}:*')" -eq 0
check "the other jobs' keys stay" test "$(rcli EXISTS 'ftc:{s}:members' 'ftc:{st2}:members')" -eq 2
"$FTC" status "${J[@]}" >"$T/status2.txt" 2>&1
check "status of the cleaned job shows no member and no generation" \
    bash -c "grep -q '^job st' '$T/status2.txt' && ! grep -Eq '^(A|B) ' '$T/status2.txt'"
"$FTC" clean "${J[@]}" >"$T/clean.txt" 2>&1
check "a second clean removes nothing (exit $?)" grep -qx "removed 0 keys of job st" "$T/clean.txt"
"$FTC" clean --redis redis://127.0.0.1:1/0 --job st >"$T/bad.txt" 2>&1
rc=$?
check "clean with an unreachable --redis fails with exit 1 ($rc)" test $rc -eq 1
check "and says it is unreachable" grep -q "^ftc clean: .*unreachable" "$T/bad.txt"

"$FTC" status --redis redis://127.0.0.1:1/0 --job st >"$T/bad.txt" 2>&1
rc=$?
check "an unreachable --redis fails with exit 1" test $rc -eq 1
check "and says it is unreachable" grep -q "unreachable" "$T/bad.txt"
"$FTC" status --job nojob --job-dir "$T/none" >"$T/none.txt" 2>&1
check "no Redis for the job: exit 1" test $? -eq 1
check "and says what to pass" grep -q -- "--redis URL" "$T/none.txt"
"$FTC" status --redis http://x >"$T/url.txt" 2>&1
check "a malformed URL is refused" grep -q "redis://" "$T/url.txt"

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
