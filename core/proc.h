/*
 * proc.h — a process's /proc/PID/stat, read and parsed in one place: the
 * supervisor's child scan, the agent's check of a WATCH's sender, the
 * detector's exit check without pidfd and the file store's "exiting" test
 * each had their own sscanf of it.
 */
#ifndef FTC_CORE_PROC_H
#define FTC_CORE_PROC_H

#include <stddef.h>
#include <sys/types.h>

typedef struct ftc_proc_stat {
    char comm[64];       /* the command name (cut to 63 bytes); may hold ')' and spaces */
    char state;          /* 'R', 'S', 'D', 'Z' (exited, not reaped), 'X', 't', ... */
    pid_t ppid, pgid;    /* fields 4 and 5 */
    unsigned long flags; /* field 9, PF_* (0x4: PF_EXITING) */
    unsigned long long utime, stime; /* fields 14 and 15: CPU time used, in clock ticks
                                        (sysconf(_SC_CLK_TCK) a second) */
} ftc_proc_stat_t;

/* Parses the text of a /proc/PID/stat ("PID (COMM) STATE PPID PGRP SESSION
 * TTY_NR TPGID FLAGS MINFLT CMINFLT MAJFLT CMAJFLT UTIME STIME ...", len
 * bytes, not NUL-terminated): COMM runs from the first '(' to the LAST ')',
 * since it may hold both. 0, or FTC_EPROTO
 * when the text is not of that form (fields missing, a field that is not
 * a whole number in range). Pure; thread-safe. */
int ftc_proc_stat_parse(const char *text, size_t len, ftc_proc_stat_t *st);
/* Reads and parses /proc/PID/stat: 0; FTC_ENOENT when the process is gone
 * (or there is no /proc); FTC_EPROTO when the file is not of that form. */
int ftc_proc_stat_read(pid_t pid, ftc_proc_stat_t *st);

/* The "flags:" line of a /proc/PID/fdinfo/FD text (len bytes, not
 * NUL-terminated): a line that starts with "flags:", blanks, then one
 * whole octal number that fits an unsigned int (the file's open flags:
 * O_ACCMODE and the rest), then the end of the line or text. 0 with
 * *flags, or FTC_EPROTO when there is no such line or it is not of that
 * form ("flags: 0100002x" is not 0100002). Pure; thread-safe. */
int ftc_proc_fdinfo_flags_parse(const char *text, size_t len, unsigned *flags);

#endif
