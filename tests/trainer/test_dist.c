/*
 * test_dist.c — the failure paths of trainer/dist.c's join, with real
 * libfabric endpoints and real loopback sockets:
 *   - a join whose address exchange times out closes the endpoint it opened
 *     (counted as open file descriptors, before and after).
 */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/fabric.h"
#include "trainer/dist.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_exchange_timeout_closes_endpoint(void **state)
{
    (void)state;
    /* warm up: libfabric keeps some process-wide state after its first use */
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    ftc_fabric_t *fab = NULL;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&fo, &fab, &err) < 0)
        fail_msg("fabric: %s", err.msg);
    ftc_fabric_close(fab);
    char *dir = ftc_test_tmpdir("dist");
    int before = count_fds();
    for (int rep = 0; rep < 3; rep++) {
        /* rank 0 of 2; rank 1 never comes */
        ftc_dist_opts_t o = {.world = 2, .tp = 1, .rank = 0, .dir = dir, .timeout_ms = 200};
        ftc_dist_t *d = NULL;
        memset(&err, 0, sizeof err);
        int rc = ftc_dist_join(&o, &d, &err);
        assert_int_equal(rc, FTC_ETIMEDOUT);
        assert_null(d);
        assert_non_null(strstr(err.msg, "missing"));
    }
    int after = count_fds();
    if (after != before)
        fail_msg("%d file descriptors open before three timed-out joins, %d after: the "
                 "endpoints leaked",
                 before, after);
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchange_timeout_closes_endpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
