/*
 * fabric_test.h — helpers shared by the tests that run over libfabric
 * (core/test_fabric.c, trainer/test_coll.c, trainer/test_model_tp.c): the
 * provider named on the command line, skipped (exit 77) when absent, and the
 * reaping of forked ranks that each opened an endpoint. Include after
 * "ftc_test.h".
 */
#ifndef FTC_TEST_FABRIC_TEST_H
#define FTC_TEST_FABRIC_TEST_H

#include "ftc_test.h"

#include "core/clock.h"
#include "core/fabric.h"

#include <rdma/fabric.h>

#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

static inline bool ftc_test_provider_present(const char *prov)
{
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    if (!hints)
        return false;
    hints->fabric_attr->prov_name = strdup(prov);
    int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints,
                        &info);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return rc == 0;
}

/* The start of main(argc, argv) of `test tcp|shm [filter]`: the provider
 * ("tcp" is tcp;ofi_rxm; tcp when not given), or NULL after printing SKIPPED
 * when libfabric does not have it (main returns 77); the cmocka filter from
 * argv[2] (e.g. "test_large*"). */
static inline const char *ftc_test_fabric_args(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "tcp";
    const char *prov = !strcmp(which, "tcp") ? "tcp;ofi_rxm" : which;
    /* libfabric filters providers by FI_PROVIDER: the test names its own */
    unsetenv("FI_PROVIDER");
    if (!ftc_test_provider_present(prov)) {
        printf("SKIPPED: libfabric provider '%s' is absent from fi_getinfo\n", prov);
        return NULL;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2)
        cmocka_set_test_filter(argv[2]);
    return prov;
}

/* Waits for the n forked ranks pids (their wait statuses in st; all killed
 * after a 240 s backstop), removes the shm regions that killed ranks of the
 * shm provider left (named in dir/RANK.addr), then dir itself. */
static inline void ftc_test_reap_ranks(const pid_t *pids, int n, int *st, const char *dir,
                                       const char *prov)
{
    uint64_t t0 = ftc_now_ns();
    for (int r = 0; r < n; r++) {
        for (;;) {
            pid_t w = waitpid(pids[r], &st[r], WNOHANG);
            if (w == pids[r])
                break;
            if (ftc_now_ns() - t0 > 240ull * 1000000000ull) { /* backstop */
                for (int q = 0; q < n; q++)
                    kill(pids[q], SIGKILL);
                waitpid(pids[r], &st[r], 0);
                break;
            }
            ftc_sleep_ms(5);
        }
    }
    /* shm names a region after each endpoint; a killed rank leaves it */
    if (!strncmp(prov, "shm", 3)) {
        for (int r = 0; r < n; r++) {
            char p[PATH_MAX], a[FTC_FABRIC_ADDR_MAX + 1] = {0};
            snprintf(p, sizeof p, "%s/%d.addr", dir, r);
            FILE *f = fopen(p, "rb");
            if (!f)
                continue;
            size_t got = fread(a, 1, FTC_FABRIC_ADDR_MAX, f);
            fclose(f);
            a[got < FTC_FABRIC_ADDR_MAX ? got : FTC_FABRIC_ADDR_MAX] = 0;
            const char *nm = strstr(a, "://");
            snprintf(p, sizeof p, "/dev/shm/%s", nm ? nm + 3 : a);
            unlink(p);
        }
    }
    ftc_test_rmrf(dir);
}

#endif
