/*
 * shmrank_main.c — a rank for test_run_signals.sh 5 that holds real
 * libfabric shm endpoints: it opens two (ftc_fabric_open, provider "shm"),
 * each of which makes a region in /dev/shm named after this process,
 * appends one line "PID NAME NAME" (the regions' names, from the endpoints'
 * addresses "fi_shm://NAME") to the file given, with one write(2), and then
 * waits to be killed, ignoring SIGTERM: a rank stuck where it does not
 * answer it, which its supervisor SIGKILLs after --grace-ms. (libfabric's shm
 * provider handles SIGTERM itself, unlinking its regions before it re-raises
 * the signal; a SIGKILLed process gets no such chance.) It never closes the
 * endpoints unless nobody killed it within WAIT_S: what removes the regions
 * of a killed one is the supervisor that reaps it.
 *
 * usage: shmrank_main OUT_FILE [WAIT_S]   (WAIT_S, default 300: then it
 * exits 1, saying nobody stopped it). Exits 77 with SKIPPED when the shm
 * provider is absent, 1 on other errors.
 */
#include "core/fabric.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shmrank_main OUT_FILE [WAIT_S]\n");
        return 2;
    }
    int wait_s = argc > 2 ? atoi(argv[2]) : 300;
    char line[1024];
    int n = snprintf(line, sizeof line, "%d", (int)getpid());
    ftc_fabric_t *fab[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
        o.provider = "shm";
        ftc_err_t err = {0};
        int rc = ftc_fabric_open(&o, &fab[i], &err);
        if (rc) {
            fprintf(stderr, "%s: %s\n", rc == FTC_EUNSUPPORTED ? "SKIPPED" : "shmrank", err.msg);
            return rc == FTC_EUNSUPPORTED ? 77 : 1;
        }
        char addr[FTC_FABRIC_ADDR_MAX + 1];
        size_t len = FTC_FABRIC_ADDR_MAX;
        if (ftc_fabric_getname(fab[i], addr, &len)) {
            fprintf(stderr, "shmrank: %s\n", ftc_fabric_errmsg(fab[i]));
            return 1;
        }
        addr[len] = 0;
        const char *name = strstr(addr, "://");
        n += snprintf(line + n, sizeof line - (size_t)n, " %s", name ? name + 3 : addr);
    }
    if (n >= (int)sizeof line - 1) {
        fprintf(stderr, "shmrank: region names too long\n");
        return 1;
    }
    line[n++] = '\n';
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0) {
        perror(argv[1]);
        return 1;
    }
    /* after the endpoints: libfabric's shm installs its own SIGTERM handler */
    signal(SIGTERM, SIG_IGN);
    for (int i = 0; i < wait_s; i++)
        sleep(1);
    fprintf(stderr, "shmrank: not stopped within %d s\n", wait_s);
    for (int i = 0; i < 2; i++)
        ftc_fabric_close(fab[i]);
    return 1;
}
