/*
 * holdexit_main.c — for test_run_signals.sh 8: keeps a process from being
 * reaped for a while after it is SIGKILLed, as a rank stuck in the kernel
 * would be. It attaches to PID with PTRACE_SEIZE and PTRACE_O_TRACEEXIT: a
 * tracee stops at PTRACE_EVENT_EXIT on its way out, SIGKILLed too (checked
 * on Linux 6.18), and stays there, not a zombie yet, until its tracer lets
 * it go. The signals it gets meanwhile are passed on unchanged. READY_FILE
 * is written once attached; HOLD_S seconds after the exit stop the tracee is
 * detached (it then finishes exiting) and this program exits 0.
 *
 * usage: holdexit_main PID READY_FILE HOLD_S [MAX_S]
 * MAX_S (default 300): the most it runs; then it exits 1, and the tracee,
 * detached by the kernel when its tracer is gone, goes on. Exits 77 with
 * SKIPPED when it may not trace PID (no ptrace here: seccomp, Yama) or the
 * tracee exits without stopping at PTRACE_EVENT_EXIT (a kernel that does
 * not stop a SIGKILLed tracee there), 1 on other errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: holdexit_main PID READY_FILE HOLD_S [MAX_S]\n");
        return 2;
    }
    pid_t pid = (pid_t)atoi(argv[1]);
    int hold_s = atoi(argv[3]), max_s = argc > 4 ? atoi(argv[4]) : 300;
    if (pid <= 0 || hold_s < 0 || max_s <= hold_s) {
        fprintf(stderr, "holdexit_main: bad PID, HOLD_S or MAX_S\n");
        return 2;
    }
    alarm((unsigned)max_s); /* never hangs: SIGALRM ends it, the tracee detached */
    if (ptrace(PTRACE_SEIZE, pid, 0, (void *)(long)PTRACE_O_TRACEEXIT) != 0) {
        int e = errno;
        printf("SKIPPED: holdexit_main: cannot trace pid %d: %s\n", (int)pid, strerror(e));
        return e == EPERM || e == EACCES ? 77 : 1;
    }
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, "held\n", 5) != 5) {
        perror("holdexit_main: READY_FILE");
        return 1;
    }
    close(fd);
    for (;;) {
        int st;
        if (waitpid(pid, &st, __WALL) != pid) {
            if (errno == EINTR)
                continue;
            perror("holdexit_main: waitpid");
            return 1;
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            printf("SKIPPED: holdexit_main: pid %d exited without stopping at "
                   "PTRACE_EVENT_EXIT\n", (int)pid);
            return 77;
        }
        if (!WIFSTOPPED(st))
            continue;
        int event = st >> 16;
        if (event == PTRACE_EVENT_EXIT) {
            printf("holdexit_main: pid %d stopped at exit, held %d s\n", (int)pid, hold_s);
            fflush(stdout);
            sleep((unsigned)hold_s);
            if (ptrace(PTRACE_DETACH, pid, 0, 0) != 0)
                perror("holdexit_main: PTRACE_DETACH");
            return 0;
        }
        int sig = WSTOPSIG(st);
        bool group_stop = event == PTRACE_EVENT_STOP && (sig == SIGSTOP || sig == SIGTSTP ||
                                                         sig == SIGTTIN || sig == SIGTTOU);
        if (group_stop) /* (SIGSTOP): it stays stopped until a SIGCONT */
            ptrace(PTRACE_LISTEN, pid, 0, 0);
        else /* a signal on its way is delivered as it was; another event stop resumes */
            ptrace(PTRACE_CONT, pid, 0, (void *)(long)(event ? 0 : sig));
    }
}
