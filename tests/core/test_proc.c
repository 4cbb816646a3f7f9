/* test_proc.c — /proc/PID/stat read and parsed (core/proc.h): this process,
 * a zombie child, a process that is gone, and texts that are not of that
 * form (a command name holding ") (", fields missing or not numbers). */
#include "ftc_test.h"

#include "core/err.h"
#include "core/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_self_and_a_zombie(void **state)
{
    (void)state;
    ftc_proc_stat_t ps;
    assert_int_equal(ftc_proc_stat_read(getpid(), &ps), 0);
    assert_int_equal(ps.ppid, getppid());
    assert_int_equal(ps.pgid, getpgrp());
    assert_int_equal(ps.state, 'R'); /* it is reading its own file */
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0)
        _exit(0);
    for (int i = 0; i < 2000; i++) { /* until it has exited (unreaped: 'Z') */
        assert_int_equal(ftc_proc_stat_read(c, &ps), 0);
        if (ps.state == 'Z')
            break;
        usleep(1000);
    }
    assert_int_equal(ps.state, 'Z');
    assert_int_equal(ps.ppid, getpid());
    assert_int_equal(waitpid(c, NULL, 0), c);
    assert_int_equal(ftc_proc_stat_read(c, &ps), FTC_ENOENT); /* gone */
}

static void test_texts(void **state)
{
    (void)state;
    ftc_proc_stat_t ps;
    const char *ok = "42 (a) (b c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 3 4\n";
    assert_int_equal(ftc_proc_stat_parse(ok, strlen(ok), &ps), 0);
    assert_string_equal(ps.comm, "a) (b c"); /* up to the LAST ')' */
    assert_int_equal(ps.state, 'S');
    assert_int_equal(ps.ppid, 7);
    assert_int_equal(ps.pgid, 42);
    assert_int_equal(ps.flags, 4194560ul);
    assert_true(ps.utime == 1 && ps.stime == 2);
    static const char *const bad[] = {
        "",
        "42 a S 7 42 42 0 -1 0",          /* no parentheses */
        "42 (a) S 7 42",                  /* fields missing */
        "42 (a) S -7 42 42 0 -1 0",       /* a negative ppid */
        "42 (a) S 7x 42 42 0 -1 0",       /* not a whole number */
        "42 (a) 7 7 42 42 0 -1 0",        /* no state letter */
        "42 (a) S 7 42 42 0 -1 99999999999999999999", /* flags out of range */
        "42 (a) S 7 42 42 0 -1 0 0 0 0 0 5",            /* no stime */
        "42 (a) S 7 42 42 0 -1 0 0 0 0 0 -5 6",         /* a negative utime */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ftc_proc_stat_parse(bad[i], strlen(bad[i]), &ps), FTC_EPROTO);
    /* not NUL-terminated: only len bytes are read */
    char cut[64];
    memcpy(cut, ok, 20);
    memset(cut + 20, 'x', sizeof cut - 20);
    assert_int_equal(ftc_proc_stat_parse(cut, 20, &ps), FTC_EPROTO);
}

/* The "flags:" line of /proc/PID/fdinfo/FD, strictly: the file store took
 * strtoul(f + 6, NULL, 8) of the first "flags:" anywhere, so "flags:
 * 0100002x" was O_RDWR and "flags: 9" or an overflow was read as O_RDONLY. */
static void test_fdinfo(void **state)
{
    (void)state;
    unsigned fl = 7;
    const char *ok = "pos:\t0\nflags:\t0100002\nmnt_id:\t29\nino:\t5\n";
    assert_int_equal(ftc_proc_fdinfo_flags_parse(ok, strlen(ok), &fl), 0);
    assert_int_equal(fl, 0100002u);
    assert_int_equal(ftc_proc_fdinfo_flags_parse("flags: 01", 9, &fl), 0); /* text ends */
    assert_int_equal(fl, 1u);
    static const char *const bad[] = {
        "",
        "pos:\t0\nmnt_id:\t29\n",               /* no flags line */
        "pos:\t0\nflags:\t0100002x\n",          /* a word after the number */
        "flags:\t9\n",                           /* not octal */
        "flags:\t\n",                            /* no digits */
        "flags:0100002\n",                       /* no blank after the key */
        "flags:\t-1\n",                          /* a sign */
        "flags:\t77777777777777777777777\n",     /* over an unsigned int */
        "flags:\t040000000000\n",                /* 2^32: just over */
        "xflags:\t01\n",                         /* not at the start of a line */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ftc_proc_fdinfo_flags_parse(bad[i], strlen(bad[i]), &fl) != FTC_EPROTO)
            fail_msg("fdinfo text %zu '%s' parsed as %o", i, bad[i], fl);
    /* only len bytes are read: the digits cut short are the text's end */
    assert_int_equal(ftc_proc_fdinfo_flags_parse("flags:\t01x", 9, &fl), 0);
    assert_int_equal(fl, 1u);
    /* the kernel's: a file open for writing, one for reading */
    char path[] = "/tmp/ftc-fdinfo-XXXXXX", p[64], info[512];
    int w = mkstemp(path);
    assert_true(w >= 0);
    int r = open(path, O_RDONLY);
    assert_true(r >= 0);
    unlink(path);
    int fds[2] = {w, r}, modes[2] = {O_RDWR, O_RDONLY};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "/proc/self/fdinfo/%d", fds[i]);
        int f = open(p, O_RDONLY);
        assert_true(f >= 0);
        ssize_t n = read(f, info, sizeof info);
        close(f);
        assert_true(n > 0);
        assert_int_equal(ftc_proc_fdinfo_flags_parse(info, (size_t)n, &fl), 0);
        assert_int_equal((int)(fl & O_ACCMODE), modes[i]);
    }
    close(w);
    close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_and_a_zombie),
        cmocka_unit_test(test_texts),
        cmocka_unit_test(test_fdinfo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
