# lib.sh — helpers shared by the `ftc run` drills (test_run.sh,
# test_run_train.sh, test_run_netns.sh). Source it after setting FTC (the ftc
# binary); `fails` counts the failed checks.
fails=0
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
count() { grep -c -- "$1" "$2" 2>/dev/null || true; } # count PATTERN FILE
no_errors() { # EXTRA_PATTERN FILE...: no BAD restore, no EXTRA_PATTERN ("" for none), and no
    # ERROR but those of a killed node's rank losing its agent socket (its agent died first:
    # the socket reads as closed, or as reset, or writes into a broken pipe)
    local extra=$1
    shift
    ! cat "$@" | grep -v 'agent socket[a-z ]*: \(connection closed by the other side\|Connection reset by peer\|Broken pipe\)' |
        grep -q "RESTORED [0-9]* BAD\|^ERROR${extra:+\\|$extra}"
}
committed() { # JOB DIR: the job's committed step (-1 while none), from `ftc status --json`
    "$FTC" status --json --job "$1" --job-dir "$2" 2>/dev/null |
        sed -n 's/.*"committed_step": *\(-\{0,1\}[0-9]*\).*/\1/p' | head -1
}
wait_committed() { # JOB DIR STEP TIMEOUT_S: until the job committed STEP
    local end=$((SECONDS + $4)) c
    while [ $SECONDS -lt $end ]; do
        c=$(committed "$1" "$2")
        [ -n "$c" ] && [ "$c" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
lose_rank1_node() { # SCENARIO JOB JOBDIR OUT: SIGKILL the node that ran rank 1 in generation 1
    # (its supervisor, agent and ranks) and wipe its shared memory; sets lost_node (nodeI)
    lost_node=$(sed -n 's/.*ftc\[\(node[0-9]\)\] INFO run: generation 1: rank 1 (local.*/\1/p' "$4" |
        head -1)
    local victim
    victim=$(cat "$3/$lost_node.pid" 2>/dev/null)
    check "$1: found the node of rank 1 ($lost_node)" test -n "$victim"
    [ -n "$victim" ] && kill -9 "$victim"
    rm -f /dev/shm/ftc."$2".n"${lost_node#node}".* 2>/dev/null # its memory is gone with it
}
