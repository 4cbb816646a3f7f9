#!/usr/bin/env bash
# test_run_signals.sh — `ftc run` and signals, one node, real processes (the
# "training binary" is a shell script; no libftc needed):
#
#   1. a rank that is a wrapper script (sh starting the real trainer, here a
#      `sleep`, and waiting for it, as `bash train.sh` running python does):
#      SIGTERM to `ftc run` ends the job, and the trainer the wrapper started
#      is gone too (the rank's whole process group is signalled, as torchrun
#      does: it was left running, an orphan holding its GPU);
#   2. a node waiting in the rendezvous for a second node that never comes
#      (--nnodes 2, --join-timeout-ms 90000): SIGTERM ends `ftc run` (exit
#      non-zero) well before the join timeout (it used to wait it out);
#   4. SIGHUP stops the job as SIGTERM does (torchrun's handlers; it killed
#      `ftc run` at once, the trainers of its ranks orphaned);
#   3. `ftc run --simulate-nodes 2` killed with SIGKILL: its node supervisors
#      (and so their ranks) end too (they trained on until their Redis, gone
#      with the launcher, had been silent for --join-timeout-ms);
#   5. a rank holding libfabric shm endpoints (shmrank_main: regions
#      /dev/shm/<pid>:<uid>:<n>) killed with SIGKILL: once the supervisor has
#      reaped it, its regions are gone (they stayed, 16 MiB each, as nobody
#      closed the endpoints); the restarted rank ignores SIGTERM, so SIGTERM
#      to `ftc run` ends in the supervisor's own SIGKILL after --grace-ms, and
#      its regions go too. Only the names of the test's own rank processes
#      are looked at.
#   6. `ftc run --simulate-nodes 2` under FI_PROVIDER=shm, ranks holding shm
#      endpoints (shmrank_main), node 1's supervisor (its agent's and file
#      store's shm endpoints) killed with SIGKILL: once the launcher has
#      reaped it, its regions are gone, and so are those of its rank, which
#      died with it (PR_SET_PDEATHSIG) and was reparented to the launcher.
#   7. the shm-holding process is not the rank but what the rank started (a
#      wrapper script's trainer: a grandchild of the supervisor), orphaned
#      before it dies, so the supervisor (a child subreaper) adopts and reaps
#      it: (a) it is detached (its parent, a subshell, exited at once) and
#      SIGKILLed while its rank runs: its regions go; (b) after the rank is
#      killed (a restart), the new rank is a shell waiting for its trainer,
#      which ignores SIGTERM: SIGTERM to `ftc run` kills the shell, and the
#      orphaned trainer dies of the supervisor's SIGKILL to the group after
#      --grace-ms; once `ftc run` has exited it is gone and so are its
#      regions. A `setsid` child of that shell, out of the rank's group, is
#      not signalled but named in a warning. (Before: init reaped the
#      orphans and their regions stayed, 16 MiB each.)
#   8. a rank that does not exit after its SIGKILL: local rank 0 (shmrank_main)
#      is held at exit by a tracer (holdexit_main: PTRACE_O_TRACEEXIT) for 3 s
#      once SIGKILLed; local rank 1 fails, the supervisor stops rank 0 (SIGTERM
#      ignored, SIGKILL after --grace-ms) and, with FTC_RUN_KILL_REAP_MS=300,
#      stops waiting for it with an ERROR, starts generation 2, and reaps the
#      ex-rank when it is let go (its regions removed). It is never named as a
#      process that escaped its rank's group (it was: a direct child no longer
#      in the rank table, its group no longer recorded). Skipped where it
#      cannot be traced or the kernel does not stop it at exit.
#   8b. the set of given-up rank processes full (FTC_RUN_GAVE_UP_MAX=1, a test
#      knob for FTC__MAX_LOCAL, 64): rank 0 held at exit in generation 1 and
#      again in generation 2, the first still held when the second is given
#      up: a WARN, once, names the second as not remembered (it was dropped
#      without a word); the first is reaped as given up when let go, the
#      second by the orphan sweep: neither stays a zombie.
#   9. a rank's exit is a rank_exit event in `ftc events` whether or not it
#      ever connected to its agent: (a) a rank that never does (a `sleep`, no
#      libftc) SIGKILLed: its event names its pid (there was none: the agent
#      watched a rank only from its HELLO; now the supervisor registers each
#      rank it spawns, message WATCH); (b) a rank linked with libftc
#      (rank_main) SIGKILLed after it connected (watched from its spawn and
#      again from its HELLO): exactly one event for its pid; (c) an agent
#      whose loop is busy when the WATCHes come (FTC_TEST_AGENT_WATCH_DELAY_MS:
#      1500 ms in each, as a HELLO's Redis call while Redis does not answer
#      takes seconds): the second rank of the node (a `sleep`) is watched
#      all the same, and its SIGKILL is its rank_exit event (before: the late
#      answer to rank 0's WATCH turned WATCH off for the generation, rank 1
#      was never registered and its exit was no event); (d) a rank found hung
#      (SIGSTOP) and SIGKILLed by its supervisor has its hang event and no
#      rank_exit (its SIGKILL was one, a second event of the same failure).
#   a. the supervisor SIGKILLed while its rank is between fork and
#      PR_SET_PDEATHSIG (held there by strace's delay injection on the
#      child's setsid, which comes just before): the rank, which would never
#      have been signalled, sees that its parent is gone and ends before its
#      exec (before, it ran on, `sleep 300`, with no supervisor). Skipped
#      without strace or where it cannot trace.
#   b. `ftc run --simulate-nodes 1`, its embedded redis-server SIGKILLed
#      mid-job: the launcher's wait for any child reaps it, and its pid is
#      free; a `sleep` of the test takes that pid (a pid namespace of its
#      own, ns_last_pid); when the node, cut off, has given up and the
#      launcher stops its Redis, that `sleep` is not signalled (before, the
#      launcher's SIGTERM, meant for its reaped redis-server, killed it).
#      Root only (unshare --pid); skipped otherwise.
#   c. a rank that exits 0 leaving a `sleep 1` in its process group (the
#      supervisor, a subreaper, reaps it): once the group is empty, a new
#      group (setsid) of the test takes its id (pid namespace, ns_last_pid);
#      SIGTERM to `ftc run` does not reach that group (before, the empty
#      group's id stayed recorded and the stop sent SIGTERM to -id). Root
#      only; skipped otherwise.
##   d. `ftc run --simulate-nodes 2 --nnodes 1:2`, node 1's supervisor
#      SIGKILLed and reaped by the launcher, its pid then taken by a `sleep`
#      of the test (pid namespace, ns_last_pid): SIGTERM to the launcher,
#      which passes it on to its nodes, does not reach that `sleep` (before,
#      the launcher signalled every node's pid, the reaped ones too). Root
#      only; skipped otherwise.
##   e. the launcher (`--simulate-nodes 2 --nnodes 1:2`, each reap of it
#      delayed by strace) gets SIGTERM while it reaps killed node 1, not
#      while it waits for a child: it still passes the stop on to node 0 and
#      ends (before, the signal was taken where no wait was interrupted, the
#      next wait blocked, and the job ran on, its stop lost). Skipped without
#      strace.
##   f. SIGUSR1 to `ftc run` and its rank at once, as Slurm's warning signal
#      (`sbatch --signal=USR1@90`) reaches every process of the step: the
#      rank's handler saves (1 s) and exits 0, and `ftc run` ends with 0
#      (before, `ftc run` died of SIGUSR1, its default action, and its rank,
#      SIGKILLed by PR_SET_PDEATHSIG, never finished its save).
#
# usage: test_run_signals.sh PATH/TO/ftc PATH/TO/shmrank_main PATH/TO/holdexit_main
#                            PATH/TO/rank_main
set -u
FTC=${1:?usage: test_run_signals.sh FTC SHMRANK HOLDEXIT RANK_MAIN}
SHMRANK=${2:-}
HOLDEXIT=${3:-}
RANKMAIN=${4:-}
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/runsig-XXXXXX")
tag=$$
pids=()
# rank_regions_rm FILE [kill]: of the rank processes FILE lists ("PID NAME..." lines), with
# kill each SIGKILLed first, removes the shm regions named after those that are gone
rank_regions_rm() {
    local p names n
    [ -s "$1" ] && while read -r p names; do
        [ -n "${2:-}" ] && kill -9 "$p" 2>/dev/null && wait_for 5 gone "$p"
        gone "$p" && for n in $names; do case $n in "$p":*) rm -f "/dev/shm/$n" ;; esac; done
    done <"$1"
}
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "$p" 2>/dev/null; done
    [ -s "$T/1.child" ] && kill -9 "$(cat "$T/1.child")" 2>/dev/null
    [ -s "$T/children" ] && kill -9 $(cat "$T/children") 2>/dev/null
    wait 2>/dev/null
    rm -rf /dev/shm/ftc.sig"$tag"* 2>/dev/null
    # shm regions our scenario-5 ranks made, if a failure left them: those of
    # processes that are gone (a live one removes its own)
    rank_regions_rm "$T/5.ranks"
    rank_regions_rm "$T/7.ranks" kill
    [ -s "$T/7.escaped" ] && kill -9 "$(cat "$T/7.escaped")" 2>/dev/null
    rank_regions_rm "$T/8.ranks" kill
    rank_regions_rm "$T/8b.ranks" kill
    [ -n "${FTC_KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # check, count
unset FTC_NODE_RANK NODE_RANK SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_NODEID
export FTC_LOG_LEVEL=${FTC_LOG_LEVEL:-info}
want() { case ${FTC_RUN_ONLY:-123456789abcdef} in *$1*) return 0 ;; esac; return 1; }
# until COMMAND succeeds, at most S seconds
wait_for() {
    local end=$((SECONDS + $1))
    shift
    while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
    return 1
}
alive() { kill -0 "$1" 2>/dev/null; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# a rank that is a wrapper script: it starts its trainer (sleep) and waits
cat >"$T/wrapper.sh" <<EOF
#!/bin/sh
sleep 300 &
echo \$! >"$T/1.child"
wait
EOF
chmod +x "$T/wrapper.sh"

# ---- 1. SIGTERM reaches the processes a rank started -----------------------------------------
if want 1; then
J1=sig${tag}a
f0=$fails
"$FTC" run --job "$J1" --job-dir "$T/j1" --settle-ms 200 --grace-ms 2000 -- "$T/wrapper.sh" \
    >"$T/1.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "1: the rank started its trainer" wait_for 60 test -s "$T/1.child"
child=$(cat "$T/1.child" 2>/dev/null)
check "1: the trainer runs (pid $child)" alive "${child:-0}"
kill -TERM "$runpid"
check "1: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
rc=$?
check "1: with a non-zero exit ($rc)" test $rc -ne 0
check "1: the trainer the rank started is gone too (no orphan)" wait_for 10 gone "${child:-0}"
[ $fails -eq $f0 ] || { echo "--- output of 1:"; tail -30 "$T/1.out"; }
fi

# ---- 2. SIGTERM while waiting in the rendezvous -----------------------------------------------
if want 2; then
J2=sig${tag}b
f0=$fails
"$FTC" run --nnodes 2 --node-rank 0 --job "$J2" --job-dir "$T/j2" --settle-ms 200 \
    --join-timeout-ms 90000 -- /bin/true >"$T/2.out" 2>&1 &
runpid=$!
pids+=($runpid)
# its agent is not up before the round closes; the round is joined once Redis is
check "2: the node is up (its Redis url written)" wait_for 60 test -s "$T/j2/redis.url"
sleep 1
check "2: and waits for the second node" alive "$runpid"
kill -TERM "$runpid"
check "2: ftc run ended on SIGTERM, before the join timeout" wait_for 30 gone "$runpid"
wait "$runpid"
rc=$?
check "2: with a non-zero exit ($rc)" test $rc -ne 0
check "2: saying it was stopped by a signal" grep -q "stopped by a signal" "$T/2.out"
[ $fails -eq $f0 ] || { echo "--- output of 2:"; tail -30 "$T/2.out"; }
fi

# ---- 4. SIGHUP (the terminal went away) stops the job as SIGTERM does ------------------------
if want 4; then
for sig in HUP; do
J4=sig${tag}d$sig
f0=$fails
rm -f "$T/1.child"
"$FTC" run --job "$J4" --job-dir "$T/j4$sig" --settle-ms 200 --grace-ms 2000 -- "$T/wrapper.sh" \
    >"$T/4$sig.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "4: SIG$sig: the rank started its trainer" wait_for 60 test -s "$T/1.child"
child=$(cat "$T/1.child" 2>/dev/null)
echo "$child" >>"$T/children"
kill -$sig "$runpid"
check "4: SIG$sig: ftc run ended" wait_for 30 gone "$runpid"
wait "$runpid"
rc=$?
check "4: SIG$sig: saying it was stopped by a signal (exit $rc)" \
    grep -q "stopped by a signal" "$T/4$sig.out"
check "4: SIG$sig: the trainer the rank started is gone too" wait_for 10 gone "${child:-0}"
[ $fails -eq $f0 ] || { echo "--- output of 4 ($sig):"; tail -30 "$T/4$sig.out"; }
done
fi

# ---- 3. SIGKILL to `ftc run --simulate-nodes` --------------------------------------------------
if want 3; then
J3=sig${tag}c
f0=$fails
setsid "$FTC" run --simulate-nodes 2 --job "$J3" --job-dir "$T/j3" --settle-ms 200 \
    --join-timeout-ms 90000 -- sh -c "echo \$\$ >$T/3.rank.\$RANK; exec sleep 300" \
    >"$T/3.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "3: both ranks started" wait_for 60 test -s "$T/3.rank.0" -a -s "$T/3.rank.1"
n0=$(cat "$T/j3/node0.pid" 2>/dev/null) n1=$(cat "$T/j3/node1.pid" 2>/dev/null)
r0=$(cat "$T/3.rank.0" 2>/dev/null) r1=$(cat "$T/3.rank.1" 2>/dev/null)
check "3: the node supervisors ($n0, $n1) and ranks ($r0, $r1) run" \
    bash -c "kill -0 ${n0:-0} && kill -0 ${n1:-0} && kill -0 ${r0:-0} && kill -0 ${r1:-0}"
kill -9 "$runpid"
wait "$runpid" 2>/dev/null
check "3: after SIGKILL to ftc run, its node supervisors end" \
    wait_for 30 bash -c "! kill -0 ${n0:-0} 2>/dev/null && ! kill -0 ${n1:-0} 2>/dev/null"
check "3: and so do their ranks" \
    wait_for 10 bash -c "! kill -0 ${r0:-0} 2>/dev/null && ! kill -0 ${r1:-0} 2>/dev/null"
kill -9 -- -"$runpid" 2>/dev/null # whatever is left
[ $fails -eq $f0 ] || { echo "--- output of 3:"; tail -30 "$T/3.out"; }
fi

# ---- 5. a killed rank's libfabric shm regions are removed by its supervisor -------------------
# regions NAME... of a rank process PID (its line in 5.ranks): all exist / none does
regions_exist() {
    [ $# -ge 2 ] || return 1
    for n in "${@:2}"; do
        case $n in "$1":*) test -e "/dev/shm/$n" || return 1 ;; *) return 1 ;; esac
    done
}
regions_gone() { for n in "${@:2}"; do test -e "/dev/shm/$n" && return 1; done; return 0; }
rank_line() { sed -n "${1}p" "$T/5.ranks" 2>/dev/null; } # N: the Nth rank process's line
has_rank_line() { test -n "$(rank_line "$1")"; }
if want 5; then
J5=sig${tag}e
f0=$fails
check "5: shmrank_main given (the test's second argument)" test -x "$SHMRANK"
"$FTC" run --job "$J5" --job-dir "$T/j5" --settle-ms 200 --grace-ms 2000 --max-restarts 1 \
    -- "$SHMRANK" "$T/5.ranks" >"$T/5.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "5: the rank opened its shm endpoints" wait_for 60 test -s "$T/5.ranks"
read -r -a r1 <<<"$(rank_line 1)"
check "5: its regions are in /dev/shm (pid ${r1[0]:-?}: ${r1[*]:1})" \
    regions_exist "${r1[0]:-0}" "${r1[@]:1}"
[ -n "${r1[0]:-}" ] && kill -9 "${r1[0]}"
check "5: the SIGKILLed rank was reaped" wait_for 30 gone "${r1[0]:-0}"
check "5: and its shm regions are gone" regions_gone "${r1[0]:-0}" "${r1[@]:1}"
check "5: the rank was restarted" wait_for 60 has_rank_line 2
read -r -a r2 <<<"$(rank_line 2)"
check "5: the new rank's regions are in /dev/shm (pid ${r2[0]:-?}: ${r2[*]:1})" \
    regions_exist "${r2[0]:-0}" "${r2[@]:1}"
kill -TERM "$runpid"
check "5: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
check "5: the rank it SIGKILLed (SIGTERM ignored) was reaped" gone "${r2[0]:-0}"
check "5: and its shm regions are gone" regions_gone "${r2[0]:-0}" "${r2[@]:1}"
[ $fails -eq $f0 ] || { echo "--- output of 5:"; tail -30 "$T/5.out"; }
fi

# ---- 6. a killed node supervisor's shm regions are removed by the launcher ----------------------
node_regions() { ls /dev/shm 2>/dev/null | grep "^$1:"; } # PID: its regions' names
if want 6; then
J6=sig${tag}f
f0=$fails
FI_PROVIDER=shm setsid "$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$J6" --job-dir "$T/j6" \
    --settle-ms 200 --grace-ms 2000 -- sh -c "echo \$\$ >$T/6.rank.\$RANK; exec $SHMRANK $T/6.ranks" \
    >"$T/6.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "6: both ranks started" wait_for 60 test -s "$T/6.rank.0" -a -s "$T/6.rank.1"
check "6: both hold shm regions" wait_for 30 bash -c "test \$(grep -c . '$T/6.ranks') = 2"
n1=$(cat "$T/j6/node1.pid" 2>/dev/null)
ppid_of() { awk '{print $4}' "/proc/$1/stat" 2>/dev/null; } # (comm holds no space here)
r1=
for r in $(cat "$T/6.rank.0" "$T/6.rank.1"); do
    [ "$(ppid_of "$r")" = "${n1:-x}" ] && r1=$r
done
check "6: node 1's supervisor (${n1:-?}) has shm regions" \
    wait_for 30 bash -c "ls /dev/shm | grep -q '^${n1:-0}:'"
check "6: node 1's rank (${r1:-?}) is its child" test -n "$r1"
names=$(node_regions "${n1:-0}" | tr '\n' ' ')
rnames=$(node_regions "${r1:-0}" | tr '\n' ' ')
[ -n "${n1:-}" ] && kill -9 "$n1"
check "6: the launcher reaped the SIGKILLed node" \
    wait_for 30 grep -q "node 1 was killed by signal 9" "$T/6.out"
check "6: and its shm regions ($names) are gone" test -z "$(node_regions "${n1:-0}")"
# its rank died of PR_SET_PDEATHSIG; orphaned, it is the launcher's (a subreaper) to reap
check "6: its rank's shm regions ($rnames) are gone too" \
    wait_for 30 bash -c "! ls /dev/shm | grep -q '^${r1:-0}:'"
kill -TERM "$runpid"
check "6: ftc run ended on SIGTERM" wait_for 60 gone "$runpid"
wait "$runpid" 2>/dev/null
kill -9 -- -"$runpid" 2>/dev/null # whatever is left
for n in $names; do case $n in "${n1:-0}":*) rm -f "/dev/shm/$n" ;; esac; done
for n in $rnames; do case $n in "${r1:-0}":*) rm -f "/dev/shm/$n" ;; esac; done
[ $fails -eq $f0 ] || { echo "--- output of 6:"; tail -30 "$T/6.out"; }
fi

# ---- 7. the shm regions of what a rank started, orphaned and killed, are removed ----------------
if want 7; then
J7=sig${tag}g
f0=$fails
# generation 1 (no 7.ranks yet): the trainer detached, the rank a `sleep`;
# later ones: the rank is the shell, waiting for its trainer and an escapee
cat >"$T/7.sh" <<EOF
#!/bin/sh
if [ ! -s "$T/7.ranks" ]; then
    ( "$SHMRANK" "$T/7.ranks" & )
    exec sleep 300
fi
setsid sleep 300 &
echo \$! >"$T/7.escaped"
"$SHMRANK" "$T/7.ranks" &
wait
EOF
chmod +x "$T/7.sh"
"$FTC" run --job "$J7" --job-dir "$T/j7" --settle-ms 200 --grace-ms 2000 --max-restarts 1 \
    -- "$T/7.sh" >"$T/7.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "7a: the detached trainer opened its shm endpoints" wait_for 60 test -s "$T/7.ranks"
read -r -a g1 <<<"$(sed -n 1p "$T/7.ranks" 2>/dev/null)"
check "7a: its regions are in /dev/shm (pid ${g1[0]:-?}: ${g1[*]:1})" \
    regions_exist "${g1[0]:-0}" "${g1[@]:1}"
[ -n "${g1[0]:-}" ] && kill -9 "${g1[0]}"
check "7a: the SIGKILLed orphan was reaped" wait_for 30 gone "${g1[0]:-0}"
check "7a: and its shm regions are gone" wait_for 30 regions_gone "${g1[0]:-0}" "${g1[@]:1}"
rank1=$(pgrep -P "$runpid" -x sleep | head -1)
check "7a: the rank still runs (${rank1:-?})" alive "${rank1:-0}"
[ -n "$rank1" ] && kill -9 "$rank1"
check "7b: the rank was restarted, its trainer opened its endpoints" \
    wait_for 60 bash -c "test \$(wc -l <'$T/7.ranks') -ge 2"
read -r -a g2 <<<"$(sed -n 2p "$T/7.ranks" 2>/dev/null)"
check "7b: its regions are in /dev/shm (pid ${g2[0]:-?}: ${g2[*]:1})" \
    regions_exist "${g2[0]:-0}" "${g2[@]:1}"
esc=$(cat "$T/7.escaped" 2>/dev/null)
kill -TERM "$runpid"
check "7b: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
check "7b: the orphaned trainer (SIGTERM ignored) was SIGKILLed and reaped" gone "${g2[0]:-0}"
check "7b: and its shm regions are gone" regions_gone "${g2[0]:-0}" "${g2[@]:1}"
check "7b: the escaped process (${esc:-?}) was named, not killed" \
    bash -c "grep -q 'pid ${esc:-x} .*escaped' '$T/7.out' && kill -0 ${esc:-0}"
[ -n "$esc" ] && kill -9 "$esc" 2>/dev/null
[ $fails -eq $f0 ] || { echo "--- output of 7:"; tail -30 "$T/7.out"; }
fi

# ---- 8. a rank that does not exit after SIGKILL is given up on, not named as escaped --------
if want 8; then
J8=sig${tag}h
f0=$fails
check "8: holdexit_main given (the test's third argument)" test -x "$HOLDEXIT"
# generation 1: local rank 0 holds shm regions and ignores SIGTERM, local rank 1 fails once
# rank 0 is held; generation 2: both sleep
cat >"$T/8.sh" <<EOF
#!/bin/sh
[ -e "$T/8.failed" ] && exec sleep 300
[ "\$LOCAL_RANK" = 0 ] && exec "$SHMRANK" "$T/8.ranks"
i=0
while [ ! -s "$T/8.held" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
touch "$T/8.failed"
exit 3
EOF
chmod +x "$T/8.sh"
FTC_RUN_KILL_REAP_MS=300 "$FTC" run --nproc-per-node 2 --job "$J8" --job-dir "$T/j8" \
    --settle-ms 200 --grace-ms 500 --max-restarts 1 -- "$T/8.sh" >"$T/8.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "8: rank 0 opened its shm endpoints" wait_for 60 test -s "$T/8.ranks"
read -r -a h <<<"$(sed -n 1p "$T/8.ranks" 2>/dev/null)"
r0=${h[0]:-0}
"$HOLDEXIT" "$r0" "$T/8.held" 3 120 >"$T/8.hold" 2>&1 &
holdpid=$!
pids+=($holdpid)
wait_for 60 grep -q 'stopped at exit\|SKIPPED' "$T/8.hold"
if grep -q SKIPPED "$T/8.hold"; then
    echo "skip: 8: $(cat "$T/8.hold")"
    touch "$T/8.held"
else
    check "8: rank 0 (pid $r0) was held at exit after its SIGKILL" \
        grep -q 'stopped at exit' "$T/8.hold"
    check "8: the supervisor stopped waiting for it" \
        wait_for 30 grep -q "rank process $r0 did not exit within 300 ms of SIGKILL" "$T/8.out"
    check "8: generation 2 started" wait_for 60 grep -q "generation 2: rank 0 " "$T/8.out"
    wait "$holdpid"
    check "8: its tracer let it go" test $? -eq 0
    check "8: the supervisor reaped it once it exited (pid $r0)" \
        wait_for 30 grep -q "rank process $r0, not waited for after SIGKILL, has exited" "$T/8.out"
    check "8: it is no zombie" wait_for 10 test ! -e "/proc/$r0"
    check "8: and its shm regions are gone" wait_for 10 regions_gone "$r0" "${h[@]:1}"
    check "8: the supervisor still runs" alive "$runpid"
fi
kill -TERM "$runpid"
check "8: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
check "8: the given-up rank was not named as escaped" \
    bash -c "! grep -q 'pid $r0 .*escaped its rank' '$T/8.out'"
check "8: nor was anything else" bash -c "! grep -q 'escaped its rank' '$T/8.out'"
[ $fails -eq $f0 ] || { echo "--- output of 8:"; tail -40 "$T/8.out"; cat "$T/8.hold"; }
fi

# ---- 8b. the given-up set full: the one not remembered is named, once ----------------------
if want 8 && ! grep -q SKIPPED "$T/8.hold" 2>/dev/null; then
J8b=sig${tag}hb
f0=$fails
# generations 1 and 2: local rank 0 holds shm regions and ignores SIGTERM, local rank 1 fails
# once the test holds rank 0 (8b.go); generation 3: both sleep
cat >"$T/8b.sh" <<EOF
#!/bin/sh
[ -e "$T/8b.failed2" ] && exec sleep 300
[ "\$LOCAL_RANK" = 0 ] && exec "$SHMRANK" "$T/8b.ranks"
i=0
while [ ! -e "$T/8b.go" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
rm -f "$T/8b.go"
if [ -e "$T/8b.failed1" ]; then touch "$T/8b.failed2"; else touch "$T/8b.failed1"; fi
exit 3
EOF
chmod +x "$T/8b.sh"
FTC_RUN_KILL_REAP_MS=300 FTC_RUN_GAVE_UP_MAX=1 "$FTC" run --nproc-per-node 2 --job "$J8b" \
    --job-dir "$T/j8b" --settle-ms 200 --grace-ms 500 --max-restarts 2 -- "$T/8b.sh" \
    >"$T/8b.out" 2>&1 &
runpid=$!
pids+=($runpid)
held=()
for k in 1 2; do # hold generation k's rank 0 at exit (the first longer than the test needs)
    check "8b: rank 0 of generation $k opened its shm endpoints" \
        wait_for 60 bash -c "[ \$(cat '$T/8b.ranks' 2>/dev/null | wc -l) -ge $k ]"
    read -r -a h <<<"$(sed -n ${k}p "$T/8b.ranks" 2>/dev/null)"
    held+=("${h[0]:-0}")
    "$HOLDEXIT" "${h[0]:-0}" "$T/8b.held.$k" $((k == 1 ? 60 : 2)) 120 >"$T/8b.hold.$k" 2>&1 &
    hp[$k]=$!
    pids+=(${hp[$k]})
    check "8b: holding rank 0 of generation $k (pid ${h[0]:-0})" wait_for 30 test -e "$T/8b.held.$k"
    touch "$T/8b.go"
    check "8b: it was given up on" wait_for 30 \
        grep -q "rank process ${h[0]:-0} did not exit within 300 ms of SIGKILL" "$T/8b.out"
done
check "8b: generation 3 started" wait_for 60 grep -q "generation 3: rank 0 " "$T/8b.out"
check "8b: the second, with the first still held, is named as not remembered" \
    grep -q "are remembered already, all still there: rank process ${held[1]} (and any" "$T/8b.out"
check "8b: said once ($(count 'are remembered already' "$T/8b.out"))" \
    test "$(count 'are remembered already' "$T/8b.out")" = 1
check "8b: the second, let go, was reaped all the same (pid ${held[1]})" \
    wait_for 30 test ! -e "/proc/${held[1]}"
kill -9 "${hp[1]}" 2>/dev/null # its tracer gone, the first finishes its exit
check "8b: the first, let go, was reaped as given up (pid ${held[0]})" \
    wait_for 30 grep -q "rank process ${held[0]}, not waited for after SIGKILL, has exited" \
    "$T/8b.out"
check "8b: and is no zombie" wait_for 10 test ! -e "/proc/${held[0]}"
kill -TERM "$runpid"
check "8b: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
[ $fails -eq $f0 ] || { echo "--- output of 8b:"; tail -40 "$T/8b.out"; cat "$T"/8b.hold.*; }
fi

# ---- 9. rank_exit events, with and without the rank's HELLO ----------------------------------
# the job's events (JSON lines), from its embedded Redis (job J9, or JOB in DIR)
events_of() { "$FTC" events --json --count 1000 \
    --redis "$(cat "${2:-$T/j9}/redis.url" 2>/dev/null)" --job "${1:-$J9}" 2>/dev/null; }
# number of rank_exit events of rank 0 whose pid is PID (exits_of PID [RANK JOB DIR]: of
# rank RANK of job JOB in DIR)
exits_of() { events_of "${3:-}" "${4:-}" | grep "\"kind\":\"rank_exit\"" |
    grep -c "rank ${2:-0} (pid $1) exited"; }
has_exit() { [ "$(exits_of "$@")" -ge 1 ]; }
if want 9; then
J9=sig${tag}i
f0=$fails
check "9: rank_main given (the test's fourth argument)" test -x "$RANKMAIN"
# generation 1: a rank without libftc; later ones: rank_main, which connects to its agent
cat >"$T/9.sh" <<EOF
#!/bin/sh
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo \$\$ >"$T/9.pid1"; exec sleep 300; fi
[ -s "$T/9.pid2" ] || echo \$\$ >"$T/9.pid2"
exec "$RANKMAIN" --steps 100000 --step-ms 50 --floats 64
EOF
chmod +x "$T/9.sh"
"$FTC" run --job "$J9" --job-dir "$T/j9" --settle-ms 200 --grace-ms 2000 --max-restarts 2 \
    -- "$T/9.sh" >"$T/9.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "9a: the rank without libftc started" wait_for 60 test -s "$T/9.pid1"
p1=$(cat "$T/9.pid1" 2>/dev/null)
sleep 0.5
[ -n "$p1" ] && kill -9 "$p1"
check "9a: its SIGKILL is a rank_exit event of pid ${p1:-?}" wait_for 30 has_exit "${p1:-x}"
check "9b: the libftc rank started" wait_for 60 test -s "$T/9.pid2"
p2=$(cat "$T/9.pid2" 2>/dev/null)
check "9b: and connected to its agent (pid ${p2:-?})" \
    wait_for 60 grep -q "rank 0 (pid ${p2:-x}) connected" "$T/9.out"
[ -n "$p2" ] && kill -9 "$p2"
check "9b: its SIGKILL is a rank_exit event of pid ${p2:-?}" wait_for 30 has_exit "${p2:-x}"
check "9b: the next generation started" wait_for 60 grep -q "generation 3: rank 0 " "$T/9.out"
sleep 1 # (a second event of the pid would be published by now)
check "9b: exactly one for that pid ($(exits_of "${p2:-x}"))" test "$(exits_of "${p2:-x}")" = 1
check "9a: and one for the rank without libftc ($(exits_of "${p1:-x}"))" \
    test "$(exits_of "${p1:-x}")" = 1
check "9: no WATCH failed" bash -c "! grep -q 'does not watch rank' '$T/9.out'"
kill -TERM "$runpid"
check "9: ftc run ended on SIGTERM" wait_for 30 gone "$runpid"
wait "$runpid"
[ $fails -eq $f0 ] || { echo "--- output of 9:"; tail -40 "$T/9.out"; events_of; }
# (c) two ranks (sleeps, no libftc), an agent that takes 1500 ms over each WATCH
J9c=sig${tag}k
f0=$fails
cat >"$T/9c.sh" <<EOF
#!/bin/sh
echo \$\$ >"$T/9c.pid\$LOCAL_RANK"
exec sleep 300
EOF
chmod +x "$T/9c.sh"
FTC_TEST_AGENT_WATCH_DELAY_MS=1500 "$FTC" run --nproc-per-node 2 --job "$J9c" \
    --job-dir "$T/j9c" --settle-ms 200 --grace-ms 2000 --max-restarts 2 -- "$T/9c.sh" \
    >"$T/9c.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "9c: rank 1 started" wait_for 60 test -s "$T/9c.pid1"
p3=$(cat "$T/9c.pid1" 2>/dev/null)
check "9c: and its WATCH was read, late (pid ${p3:-?})" \
    wait_for 30 grep -q "rank 1 (pid ${p3:-x}) watched from its start" "$T/9c.out"
check "9c: the first late answer was said" grep -q "within 500 ms (busy)" "$T/9c.out"
[ -n "$p3" ] && kill -9 "$p3"
check "9c: its SIGKILL is a rank_exit event of pid ${p3:-?}" \
    wait_for 30 has_exit "${p3:-x}" 1 "$J9c" "$T/j9c"
check "9c: no WATCH failed" bash -c "! grep -q 'does not watch rank' '$T/9c.out'"
kill -TERM "$runpid" 2>/dev/null
check "9c: ftc run ended" wait_for 30 gone "$runpid"
wait "$runpid"
[ $fails -eq $f0 ] || { echo "--- output of 9c:"; tail -40 "$T/9c.out"; events_of "$J9c" "$T/j9c"; }
# (d) a rank found hung (SIGSTOP, libftc) and SIGKILLed by its supervisor: its hang event is
# the failure; its SIGKILL is no rank_exit (it was one, "killed by signal 9", a second event)
J9d=sig${tag}m
f0=$fails
cat >"$T/9d.sh" <<EOF
#!/bin/sh
[ -s "$T/9d.pid" ] || echo \$\$ >"$T/9d.pid"
exec "$RANKMAIN" --steps 100000 --step-ms 50 --floats 64
EOF
chmod +x "$T/9d.sh"
"$FTC" run --job "$J9d" --job-dir "$T/j9d" --settle-ms 200 --grace-ms 2000 --max-restarts 2 \
    --detect-hang-ms 1000 -- "$T/9d.sh" >"$T/9d.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "9d: the rank started" wait_for 60 test -s "$T/9d.pid"
p4=$(cat "$T/9d.pid" 2>/dev/null)
check "9d: and connected to its agent (pid ${p4:-?})" \
    wait_for 60 grep -q "rank 0 (pid ${p4:-x}) connected" "$T/9d.out"
sleep 1.5 # its steps: their times give the hang limit
[ -n "$p4" ] && kill -STOP "$p4"
check "9d: its hang was found and it was killed" \
    wait_for 30 grep -q "rank 0 hangs (.*killing pid ${p4:-x}" "$T/9d.out"
check "9d: the next generation started" wait_for 60 grep -q "generation 2: rank 0 " "$T/9d.out"
sleep 1 # (its rank_exit would be published by now)
events_of "$J9d" "$T/j9d" >"$T/9d.events"
check "9d: a hang event of rank 0" grep -q '"kind":"hang"' "$T/9d.events"
check "9d: no rank_exit of the killed pid ($(exits_of "${p4:-x}" 0 "$J9d" "$T/j9d"))" \
    test "$(exits_of "${p4:-x}" 0 "$J9d" "$T/j9d")" = 0
kill -TERM "$runpid" 2>/dev/null
check "9d: ftc run ended" wait_for 30 gone "$runpid"
wait "$runpid"
[ $fails -eq $f0 ] || { echo "--- output of 9d:"; tail -40 "$T/9d.out"; cat "$T/9d.events"; }
fi

# ---- a. the supervisor killed between its rank's fork and PR_SET_PDEATHSIG ---------------
# gone or a zombie (an orphan's zombie is its new parent's to reap)
ended() { gone "$1" || [ "$(sed -n 's/^[0-9]* ([^)]*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
if want a && command -v strace >/dev/null 2>&1 &&
    strace -f -qq -o /dev/null -e trace=setsid -e inject=setsid:delay_exit=1000 -- true \
        >/dev/null 2>&1; then
Ja=sig${tag}ka
f0=$fails
strace -f -qq --seccomp-bpf -o /dev/null -e trace=setsid -e inject=setsid:delay_exit=3000000 \
    -- "$FTC" run --job "$Ja" --job-dir "$T/ja" --settle-ms 200 -- sleep 300 >"$T/a.out" 2>&1 &
spid=$!
pids+=($spid)
check "a: rank 0 was forked" wait_for 60 grep -q 'rank 0 (local 0 of 1, world 1) is pid' "$T/a.out"
rank=$(sed -n 's/.*rank 0 (local 0 of 1, world 1) is pid \([0-9]*\).*/\1/p' "$T/a.out" | head -1)
sup=$(pgrep -P "$spid" | head -1)
echo "${rank:-}" >>"$T/children" # (the cleanup's, if it runs on)
check "a: found the supervisor (pid $sup) and its rank (pid $rank)" \
    test -n "$sup" -a -n "$rank" -a "$(ps -o ppid= -p "${rank:-0}" 2>/dev/null | tr -d ' ')" = "$sup"
[ -n "$sup" ] && kill -9 "$sup"
check "a: the supervisor is gone" wait_for 10 ended "${sup:-0}"
check "a: and so is its rank, held before PR_SET_PDEATHSIG when it was killed" \
    wait_for 15 ended "${rank:-0}"
kill -9 "${rank:-0}" 2>/dev/null
check "a: strace ended with its tracees" wait_for 10 gone "$spid"
[ $fails -eq $f0 ] || { echo "--- output of a:"; tail -30 "$T/a.out"; }
elif want a; then
    echo "skip: a: no strace, or it cannot trace here"
fi

# ---- b, c, d: a pid or group id freed in a pid namespace of our own, taken by the test ----
# root with unshare --pid only
can_unshare_pid() {
    [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 &&
        unshare --pid --fork --mount-proc true 2>/dev/null
}
# sourced by the scripts of b, c and d, each run as pid 1 of its pid namespace
cat >"$T/pidns.sh" <<'EOF'
wait_for() { local end=$((SECONDS + $1)); shift
    while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done; return 1; }
# take_pid PID [setsid]: `sleep 120` (with setsid: leading a group of its own) until one
# gets pid PID (the namespace's last pid set to the one before); took: its pid, or empty
take_pid() {
    took=
    for i in $(seq 200); do
        echo $(($1 - 1)) >/proc/sys/kernel/ns_last_pid
        ${2:-} sleep 120 &
        if [ $! = "$1" ]; then took=$!; break; fi
        kill $! 2>/dev/null
    done
}
# run_ended X: once ftc run ($run) ended, says "X run-exit STATUS" and whether the process
# that took the pid ($took) lives ("X alive") or was killed, and stops it
run_ended() {
    wait_for 60 test ! -e "/proc/$run"
    wait "$run"
    echo "$1 run-exit $?"
    if kill -0 "$took" 2>/dev/null; then echo "$1 alive"; else echo "$1 killed"; fi
    kill "$took" 2>/dev/null
}
EOF
# in_pid_ns x TOOK ENDED SPARED: runs $T/x.sh in a pid namespace and checks its answers in
# $T/x.res ("X took", "X run-exit", "X alive"); TOOK, ENDED, SPARED: what each check says
in_pid_ns() {
    local x=$1 X
    X=$(printf %s "$x" | tr a-z A-Z)
    chmod +x "$T/$x.sh"
    timeout 120 unshare --pid --fork --mount-proc "$T/$x.sh" >"$T/$x.res" 2>&1
    check "$x: $2 ($(grep "^$X " "$T/$x.res" | head -1))" grep -q "^$X took" "$T/$x.res"
    check "$x: $3 ($(grep "^$X run-exit" "$T/$x.res"))" grep -q "^$X run-exit" "$T/$x.res"
    check "$x: $4" grep -q "^$X alive" "$T/$x.res"
    [ $fails -eq $f0 ] || { echo "--- output of $x:"; cat "$T/$x.res"; tail -30 "$T/$x.out"; }
}

# ---- b. the launcher's reaped redis-server: its pid is not signalled ---------------------
if want b && can_unshare_pid; then
Jb=sig${tag}kb
f0=$fails
# run in a pid namespace of our own: pid 1 is this script (it reaps what is orphaned), and
# only the job's processes take pids there, so a pid freed is ours to take
cat >"$T/b.sh" <<EOF
#!/usr/bin/env bash
. "$T/pidns.sh"
"$FTC" run --simulate-nodes 1 --job "$Jb" --job-dir "$T/jb" --settle-ms 200 \\
    --join-timeout-ms 3000 -- sleep 300 >"$T/b.out" 2>&1 &
run=\$!
wait_for 60 grep -q 'rank 0 (local 0 of 1, world 1) is pid' "$T/b.out" ||
    { echo "B no-rank"; exit 0; }
port=\$(sed -n 's/.*@[^:]*:\([0-9]*\).*/\1/p' "$T/jb/redis.url")
rpid=\$(pgrep -f "redis-server 127.0.0.1:\$port\\\$" | head -1)
[ -n "\$rpid" ] || { echo "B no-redis"; exit 0; }
kill -9 "\$rpid"
wait_for 10 test ! -e "/proc/\$rpid" || { echo "B not-reaped \$rpid"; exit 0; }
take_pid "\$rpid"
[ -n "\$took" ] || { echo "B no-pid \$rpid"; exit 0; }
echo "B took \$rpid"
run_ended B
EOF
in_pid_ns b "the redis-server's pid was taken by a sleep" "ftc run ended" \
    "the process with the reaped redis-server's pid was not signalled"
elif want b; then
    echo "skip: b: not root, or no unshare --pid"
fi

# ---- c. a rank's emptied process group: its id is not signalled -------------------------
if want c && can_unshare_pid; then
Jc=sig${tag}kc
f0=$fails
cat >"$T/c.rank.sh" <<EOF
#!/bin/sh
if [ "\$LOCAL_RANK" = 0 ]; then
    sleep 1 &
    echo \$\$ >"$T/c.rank0"
    exit 0
fi
exec sleep 300
EOF
chmod +x "$T/c.rank.sh"
cat >"$T/c.sh" <<EOF
#!/usr/bin/env bash
. "$T/pidns.sh"
"$FTC" run --nproc-per-node 2 --job "$Jc" --job-dir "$T/jc" --settle-ms 200 --grace-ms 1000 \\
    -- "$T/c.rank.sh" >"$T/c.out" 2>&1 &
run=\$!
wait_for 60 test -s "$T/c.rank0" || { echo "C no-rank"; exit 0; }
r0=\$(cat "$T/c.rank0")
# rank 0 exited 0; its group lives while its \`sleep 1\` does (reaped by the supervisor)
wait_for 20 grep -q 'rank 0 finished' "$T/c.out" || { echo "C not-finished"; exit 0; }
wait_for 20 bash -c "! kill -0 -\$r0 2>/dev/null" || { echo "C group-stays \$r0"; exit 0; }
take_pid "\$r0" setsid
[ -n "\$took" ] || { echo "C no-pid \$r0"; exit 0; }
wait_for 10 test "\$(ps -o pgid= -p "\$took" | tr -d ' ')" = "\$took" ||
    { echo "C not-leader \$took"; exit 0; }
echo "C took \$r0"
kill -TERM "\$run"
run_ended C
EOF
in_pid_ns c "finished rank 0's group id taken by a new group" "ftc run ended on SIGTERM" \
    "the new group with the old group's id was not signalled"
elif want c; then
    echo "skip: c: not root, or no unshare --pid"
fi

# ---- d. the launcher's reaped node: its pid is not signalled ------------------------------
if want d && can_unshare_pid; then
Jd=sig${tag}kd
f0=$fails
cat >"$T/d.sh" <<EOF
#!/usr/bin/env bash
. "$T/pidns.sh"
"$FTC" run --simulate-nodes 2 --nnodes 1:2 --job "$Jd" --job-dir "$T/jd" --settle-ms 200 \\
    --grace-ms 1000 -- sleep 300 >"$T/d.out" 2>&1 &
run=\$!
up() { [ "\$(grep -c 'is pid' "$T/d.out")" -ge 4 ]; }
wait_for 60 up || { echo "D no-ranks"; exit 0; }
n1=\$(cat "$T/jd/node1.pid")
kill -9 "\$n1"
wait_for 20 grep -q 'node 1 was killed by signal 9' "$T/d.out" || { echo "D not-reaped"; exit 0; }
take_pid "\$n1"
[ -n "\$took" ] || { echo "D no-pid \$n1"; exit 0; }
echo "D took \$n1"
kill -TERM "\$run"
run_ended D
EOF
in_pid_ns d "killed node 1's pid taken by a sleep" "ftc run ended on SIGTERM" \
    "the process with the reaped node's pid was not signalled"
elif want d; then
    echo "skip: d: not root, or no unshare --pid"
fi

# ---- e. a stop that comes while the launcher is not waiting is not lost --------------------
if want e && command -v strace >/dev/null 2>&1 &&
    strace -qq -o /dev/null -e trace=wait4 -e inject=wait4:delay_exit=1000 -- true \
        >/dev/null 2>&1; then
Je=sig${tag}ke
f0=$fails
# every reap (wait4) of the launcher (not of its nodes: no -f) takes 1.5 s more
strace -qq -o /dev/null -e trace=wait4 \
    -e inject=wait4:delay_exit=1500000 -- "$FTC" run --simulate-nodes 2 --nnodes 1:2 \
    --job "$Je" --job-dir "$T/je" --settle-ms 200 --grace-ms 1000 -- sleep 300 \
    >"$T/e.out" 2>&1 &
spid=$!
pids+=($spid)
check "e: both nodes started" wait_for 60 test -s "$T/je/node1.pid"
launcher=$(pgrep -P "$spid" | head -1)
n0=$(cat "$T/je/node0.pid" 2>/dev/null)
n1=$(cat "$T/je/node1.pid" 2>/dev/null)
check "e: found the launcher (${launcher:-none}), nodes 0 (${n0:-none}) and 1 (${n1:-none})" \
    test -n "$launcher" -a -n "$n0" -a -n "$n1"
if [ -n "$launcher" ] && [ -n "$n0" ] && [ -n "$n1" ]; then
    sleep 1
    kill -9 "$n1"
    sleep 0.5 # the launcher is in the wait4 that reaped node 1
    kill -TERM "$launcher"
    check "e: the launcher ended on its SIGTERM, passed on to node 0" \
        wait_for 30 gone "$launcher"
    check "e: node 0 stopped" wait_for 10 gone "$n0"
    kill -9 "$launcher" "$n0" 2>/dev/null
fi
[ $fails -eq $f0 ] || { echo "--- output of e:"; tail -30 "$T/e.out"; }
elif want e; then
    echo "skip: e: no strace, or it cannot trace here"
fi

# ---- f. Slurm's warning signal (SIGUSR1 to every process of the step) --------------------
if want f; then
Jf=sig${tag}kf
f0=$fails
cat >"$T/f.rank.sh" <<EOF
#!/usr/bin/env bash
trap 'sleep 1; echo saved >"$T/f.saved"; exit 0' USR1
echo \$\$ >"$T/f.rank"
while :; do sleep 0.1; done
EOF
chmod +x "$T/f.rank.sh"
"$FTC" run --job "$Jf" --job-dir "$T/jf" --settle-ms 200 --grace-ms 1000 -- "$T/f.rank.sh" \
    >"$T/f.out" 2>&1 &
runpid=$!
pids+=($runpid)
check "f: the rank runs" wait_for 60 test -s "$T/f.rank"
rank=$(cat "$T/f.rank" 2>/dev/null)
# as `sbatch --signal=USR1@90` does: the signal to every process of the step
[ -n "$rank" ] && kill -USR1 "$runpid" "$rank"
check "f: the rank's SIGUSR1 handler finished its save" wait_for 20 test -s "$T/f.saved"
check "f: ftc run ended" wait_for 30 gone "$runpid"
wait "$runpid"
rc=$?
check "f: with exit 0, the rank having exited 0 (exit $rc)" test $rc -eq 0
[ $fails -eq $f0 ] || { echo "--- output of f:"; tail -30 "$T/f.out"; }
fi

if [ $fails -ne 0 ]; then
    echo "test_run_signals: $fails check(s) failed"
    exit 1
fi
echo "test_run_signals: all checks passed"
