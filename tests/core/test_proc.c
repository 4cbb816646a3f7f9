/* test_proc.c — /proc/PID/stat read and parsed (core/proc.h): this process,
 * a zombie child, a process that is gone, and texts that are not of that
 * form (a command name holding ") (", fields missing or not numbers). */
#include "ftc_test.h"

#include "core/err.h"
#include "core/proc.h"

#include <signal.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_and_a_zombie),
        cmocka_unit_test(test_texts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
