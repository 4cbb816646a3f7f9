/*
 * det_agent.c — a minimal agent process for the detector tests: runs one
 * detector until SIGTERM and prints each event it sees as a line
 * "EVENT kind node rank step | detail" on stdout. Tests kill it with real
 * signals (kill -9, SIGSTOP) to play a lost node or a paused leader.
 *
 * usage: det_agent URLFILE JOB NODE [--no-campaign] [--lease-ms N]
 *                  [--ttl-ms N] [--hb-ms N] [--step-ms N] [--hang-min-ms N]
 */
#include "core/log.h"
#include "detect/detector.h"
#include "detect/redis_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static void on_event(void *arg, const ftc_ctl_event_t *e)
{
    (void)arg;
    printf("EVENT %s %s %d %lld | %s\n", e->kind, e->node, e->rank, (long long)e->step, e->detail);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s URLFILE JOB NODE [options]\n", argv[0]);
        return 2;
    }
    ftc_log_configure(FTC_LOG_WARN, argv[3]);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.job = argv[2];
    o.node = argv[3];
    o.on_event = on_event;
    int step_ms = 0;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--no-campaign"))
            o.campaign = false;
        else if (!strcmp(argv[i], "--lease-ms") && i + 1 < argc)
            o.lease_ttl_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ttl-ms") && i + 1 < argc)
            o.ttl_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hb-ms") && i + 1 < argc)
            o.heartbeat_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc)
            step_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hang-min-ms") && i + 1 < argc)
            o.hang_min_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "det_agent: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    ftc_redis_url_t url;
    ftc_err_t err = {0};
    if (ftc_redis_url_file_read(argv[1], &url, &err)) {
        fprintf(stderr, "det_agent: %s\n", err.msg);
        return 1;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    ftc_detector_t *d = ftc_detector_start(&url, &o, &err);
    if (!d) {
        fprintf(stderr, "det_agent: %s\n", err.msg);
        return 1;
    }
    printf("READY %s\n", o.node);
    fflush(stdout);
    int64_t step = 0;
    while (!stop) {
        if (step_ms > 0) {
            ftc_sleep_ms((uint64_t)step_ms);
            ftc_detector_progress(d, 0, step++, (uint64_t)step_ms * 1000);
        } else {
            ftc_sleep_ms(20);
        }
    }
    ftc_detector_stop(d, true);
    return 0;
}
