/*
 * netns.c — a bridge and one network namespace per simulated node for
 * `ftc run --simulate-nodes N --netns`. See netns.h.
 *
 * Everything goes through iproute2's `ip` (fork + exec, output captured,
 * 10 s bound), so the kernel's netlink interface stays ip's business; the
 * nodes enter their namespace with setns(2) on /run/netns/NAME.
 */
#include "plugins/netns.h"

#include "core/clock.h"
#include "core/fsio.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_CMD_MS 10000   /* one `ip` command */
#define NS_CLEAN_MS 30000 /* the watchdog's whole cleanup, as waited for by destroy */

typedef struct ns_node {
    char name[48]; /* namespace */
    char veth[16]; /* root-namespace end */
    char addr[16];
} ns_node_t;

struct ftc_netns {
    int n;
    char ip[PATH_MAX]; /* the ip binary */
    char dir[PATH_MAX];
    char bridge[16];
    char bridge_addr[16];
    ns_node_t *node;
    pid_t watchdog;
    int wfd; /* write end of the watchdog's pipe (-1: closed) */
};

/* ---- running `ip` ------------------------------------------------------------------------- */

/* Runs argv (argv[0] a path) with stdout and stderr into out (truncated,
 * NUL-terminated). Its exit status, or -1 when it could not run or ran past
 * NS_CMD_MS (then it is killed). */
static int ns_exec(char *const argv[], char *out, size_t cap)
{
    if (cap)
        out[0] = 0;
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        int dn = open("/dev/null", O_RDONLY);
        if (dn >= 0)
            dup2(dn, STDIN_FILENO);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    bool late = false;
    ftc_deadline_t d = ftc_deadline_in_ms(NS_CMD_MS);
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int r = poll(&pf, 1, 100);
        if (r > 0) {
            char buf[512];
            ssize_t k = read(p[0], buf, sizeof buf);
            if (k > 0) {
                for (ssize_t i = 0; i < k && len + 1 < cap; i++)
                    out[len++] = buf[i] == '\n' ? ' ' : buf[i];
                if (cap)
                    out[len] = 0;
                continue;
            }
            if (k == 0 || (errno != EINTR && errno != EAGAIN))
                break;
        } else if (r < 0 && errno != EINTR) {
            break;
        }
        if (ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            late = true;
            break;
        }
    }
    close(p[0]);
    int st = 0;
    ftc_deadline_t reap = ftc_deadline_in_ms(NS_CMD_MS + 2000);
    for (;;) { /* bounded too: an ip that closed its output may still hang */
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        if (!late && ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            late = true;
        }
        if (ftc_deadline_expired(reap)) { /* unkillable (D state): left unreaped */
            late = true;
            break;
        }
        if (w == 0)
            ftc_sleep_ms(5);
    }
    while (len > 0 && out[len - 1] == ' ')
        out[--len] = 0;
    if (late)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `ip ARGS...` (NULL-terminated); on failure err names the command and
 * what ip said. */
static int ns_ip(const ftc_netns_t *net, ftc_err_t *err, ...)
{
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)net->ip;
    va_list ap;
    va_start(ap, err);
    const char *a;
    while (k < 23 && (a = va_arg(ap, const char *)) != NULL)
        argv[k++] = (char *)a;
    va_end(ap);
    argv[k] = NULL;
    char out[512];
    int rc = ns_exec(argv, out, sizeof out);
    if (rc == 0)
        return 0;
    if (!err)
        return FTC_EIO;
    char cmd[512];
    size_t len = 0;
    cmd[0] = 0;
    for (int i = 1; i < k && len < sizeof cmd; i++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%s", i > 1 ? " " : "", argv[i]);
    return ftc_err_set(err, FTC_EIO, "--netns: `ip %s` failed (%s): %s", cmd,
                       rc < 0 ? "did not run or ran past 10 s" : "exit status",
                       out[0] ? out : "no output");
}

/* ---- checks ------------------------------------------------------------------------------- */

static bool ns_caps_ok(void)
{
    if (geteuid() == 0)
        return true;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return false;
    char line[256];
    unsigned long long eff = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    fclose(f);
    const unsigned long long need = (1ull << 12) | (1ull << 21); /* NET_ADMIN, SYS_ADMIN */
    return (eff & need) == need;
}

static bool ns_find_ip(char *out, size_t cap)
{
    const char *path = getenv("PATH");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (!*d)
            continue;
        int n = snprintf(out, cap, "%s/ip", d);
        if (n > 0 && (size_t)n < cap && access(out, X_OK) == 0)
            return true;
    }
    return false;
}

int ftc_netns_check(ftc_err_t *err)
{
    if (!ns_caps_ok())
        return ftc_err_set(err, FTC_EUNSUPPORTED,
                           "--netns needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN, to make network "
                           "namespaces, veths and a bridge): run as root, or leave --netns out");
    char ip[PATH_MAX];
    if (!ns_find_ip(ip, sizeof ip))
        return ftc_err_set(err, FTC_ENOENT,
                           "--netns needs iproute2's `ip`, found neither on PATH nor in "
                           "/usr/sbin or /sbin: install iproute2, or leave --netns out");
    return 0;
}

/* ---- the subnet ------------------------------------------------------------------------- */

/* 10.A.B.0/24 with A in 200..249 that no root-namespace interface has an
 * address in (several runs at once pick different ones: the seed is the pid). */
static int ns_pick_subnet(unsigned seed, int *a, int *b, ftc_err_t *err)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs))
        return ftc_err_errno(err, errno, "--netns: getifaddrs");
    for (unsigned t = 0; t < 1024; t++) {
        unsigned v = (seed + t * 7919u) * 2654435761u;
        int ca = 200 + (int)((v >> 16) % 50), cb = (int)((v >> 8) & 255);
        uint32_t net = (10u << 24) | ((uint32_t)ca << 16) | ((uint32_t)cb << 8);
        bool taken = false;
        for (struct ifaddrs *i = ifs; i && !taken; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
                continue;
            uint32_t x = ntohl(((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr);
            taken = (x & 0xffffff00u) == net;
        }
        if (!taken) {
            freeifaddrs(ifs);
            *a = ca;
            *b = cb;
            return 0;
        }
    }
    freeifaddrs(ifs);
    return ftc_err_set(err, FTC_EEXIST, "--netns: every candidate subnet 10.200-249.x.0/24 is in "
                                        "use on this machine");
}

/* ---- cleanup (the watchdog) ------------------------------------------------------------- */

/* Kills what still runs in the namespaces, deletes them, the veths and the
 * bridge, and DIR/netns. Errors are ignored: a thing already gone is fine. */
static void ns_cleanup(const ftc_netns_t *net)
{
    for (int i = 0; i < net->n; i++) {
        char *argv[] = {(char *)net->ip, "netns", "pids", (char *)net->node[i].name, NULL};
        char out[4096];
        if (ns_exec(argv, out, sizeof out) != 0)
            continue;
        for (char *save = NULL, *t = strtok_r(out, " \t", &save); t;
             t = strtok_r(NULL, " \t", &save)) {
            long pid = strtol(t, NULL, 10);
            if (pid > 1 && pid != getpid())
                kill((pid_t)pid, SIGKILL);
        }
    }
    for (int i = 0; i < net->n; i++)
        ns_ip(net, NULL, "netns", "del", net->node[i].name, NULL);
    for (int i = 0; i < net->n; i++)
        ns_ip(net, NULL, "link", "del", net->node[i].veth, NULL);
    ns_ip(net, NULL, "link", "del", net->bridge, NULL);
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/netns", net->dir);
    unlink(path);
}

static void ns_watchdog(ftc_netns_t *net, int rfd)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    close(net->wfd);
    char c;
    for (;;) {
        ssize_t k = read(rfd, &c, 1);
        if (k == 0 || (k < 0 && errno != EINTR))
            break;
    }
    ns_cleanup(net);
    _exit(0);
}

/* ---- create / enter / destroy --------------------------------------------------------------- */

static void ns_free(ftc_netns_t *net)
{
    free(net->node);
    free(net);
}

ftc_netns_t *ftc_netns_create(const char *dir, int n, ftc_err_t *err)
{
    if (!dir || n < 1 || n > FTC_NETNS_MAX_NODES) {
        ftc_err_set(err, FTC_EINVAL, "--netns: 1..%d nodes (one /24 subnet), not %d",
                    FTC_NETNS_MAX_NODES, n);
        return NULL;
    }
    if (ftc_netns_check(err))
        return NULL;
    ftc_netns_t *net = calloc(1, sizeof *net);
    if (!net || !(net->node = calloc((size_t)n, sizeof *net->node))) {
        free(net);
        ftc_err_set(err, FTC_ENOMEM, "--netns: out of memory");
        return NULL;
    }
    net->n = n;
    net->wfd = -1;
    net->watchdog = -1;
    ns_find_ip(net->ip, sizeof net->ip);
    snprintf(net->dir, sizeof net->dir, "%s", dir);
    unsigned tag = (unsigned)getpid();
    int a = 0, b = 0;
    if (ns_pick_subnet(tag, &a, &b, err)) {
        ns_free(net);
        return NULL;
    }
    snprintf(net->bridge, sizeof net->bridge, "fb%x", tag);
    snprintf(net->bridge_addr, sizeof net->bridge_addr, "10.%d.%d.1", a, b);
    for (int i = 0; i < n; i++) {
        snprintf(net->node[i].name, sizeof net->node[i].name, "ftc-%x-n%d", tag, i);
        snprintf(net->node[i].veth, sizeof net->node[i].veth, "fv%xn%d", tag, i);
        snprintf(net->node[i].addr, sizeof net->node[i].addr, "10.%d.%d.%d", a, b, i + 2);
    }
    /* the watchdog first: it removes whatever gets made, whatever happens next */
    int p[2];
    if (pipe2(p, O_CLOEXEC)) {
        ftc_err_errno(err, errno, "--netns: pipe");
        ns_free(net);
        return NULL;
    }
    net->wfd = p[1];
    fflush(NULL);
    pid_t w = fork();
    if (w < 0) {
        ftc_err_errno(err, errno, "--netns: fork of the cleanup watchdog");
        close(p[0]);
        close(p[1]);
        ns_free(net);
        return NULL;
    }
    if (w == 0)
        ns_watchdog(net, p[0]);
    close(p[0]);
    net->watchdog = w;

    char cidr[24];
    snprintf(cidr, sizeof cidr, "%s/24", net->bridge_addr);
    /* a fixed MAC: a bridge otherwise takes its ports' lowest, which changes
     * when a port goes, and the namespaces' ARP entries for it go stale */
    char mac[24];
    snprintf(mac, sizeof mac, "02:66:74:%02x:%02x:%02x", (tag >> 16) & 255, (tag >> 8) & 255,
             tag & 255);
    if (ns_ip(net, err, "link", "add", net->bridge, "address", mac, "type", "bridge", NULL) ||
        ns_ip(net, err, "addr", "add", cidr, "dev", net->bridge, NULL) ||
        ns_ip(net, err, "link", "set", net->bridge, "up", NULL))
        goto fail;
    for (int i = 0; i < n; i++) {
        const ns_node_t *x = &net->node[i];
        snprintf(cidr, sizeof cidr, "%s/24", x->addr);
        if (ns_ip(net, err, "netns", "add", x->name, NULL) ||
            ns_ip(net, err, "link", "add", x->veth, "type", "veth", "peer", "name", "eth0",
                  "netns", x->name, NULL) ||
            ns_ip(net, err, "link", "set", x->veth, "master", net->bridge, NULL) ||
            ns_ip(net, err, "link", "set", x->veth, "up", NULL) ||
            ns_ip(net, err, "-n", x->name, "addr", "add", cidr, "dev", "eth0", NULL) ||
            ns_ip(net, err, "-n", x->name, "link", "set", "lo", "up", NULL) ||
            ns_ip(net, err, "-n", x->name, "link", "set", "eth0", "up", NULL) ||
            ns_ip(net, err, "-n", x->name, "route", "add", "default", "via", net->bridge_addr,
                  NULL))
            goto fail;
    }
    /* DIR/netns: for tests, drills and people */
    size_t cap = (size_t)n * 128 + 128, len = 0;
    char *txt = malloc(cap);
    if (!txt) {
        ftc_err_set(err, FTC_ENOMEM, "--netns: out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(txt + len, cap - len, "node %d ns %s veth %s addr %s\n", i,
                                net->node[i].name, net->node[i].veth, net->node[i].addr);
    len += (size_t)snprintf(txt + len, cap - len, "bridge %s addr %s\n", net->bridge,
                            net->bridge_addr);
    int rc = ftc_fs_write_file_atomic(dir, "netns", txt, len, NULL, err);
    free(txt);
    if (rc)
        goto fail;
    FTC_INFO("netns",
             "bridge %s %s/24, %d namespaces ftc-%x-n0.. (veths fv%xn0..); listed in %s/netns",
             net->bridge, net->bridge_addr, n, tag, tag, dir);
    return net;
fail:
    ftc_netns_destroy(net);
    return NULL;
}

int ftc_netns_enter(ftc_netns_t *net, int i, ftc_err_t *err)
{
    if (!net || i < 0 || i >= net->n)
        return ftc_err_set(err, FTC_EINVAL, "--netns: no namespace for node %d", i);
    if (net->wfd >= 0) { /* only the creator keeps the watchdog waiting */
        close(net->wfd);
        net->wfd = -1;
    }
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", net->node[i].name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ftc_err_errno(err, errno, "--netns: node %d: open %s", i, path);
    int rc = setns(fd, CLONE_NEWNET);
    int e = errno;
    close(fd);
    if (rc)
        return ftc_err_errno(err, e, "--netns: node %d: setns into %s", i, net->node[i].name);
    if (setenv("FTC_FABRIC_BIND", net->node[i].addr, 1))
        return ftc_err_errno(err, errno, "--netns: setenv FTC_FABRIC_BIND");
    return 0;
}

static bool ns_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "localhost") || !strcmp(host, "::1") ||
           !strcmp(host, "[::1]") || !strcmp(host, "0.0.0.0");
}

int ftc_netns_expose_redis(ftc_netns_t *net, const ftc_redis_url_t *url, bool embedded,
                           ftc_redis_url_t *node_url, ftc_err_t *err)
{
    *node_url = *url;
    if (!embedded) {
        if (ns_loopback(url->host))
            return ftc_err_set(err, FTC_EINVAL,
                               "--netns: the Redis at %s:%d is on loopback, which the nodes' "
                               "namespaces cannot reach: give --redis an address of this machine "
                               "outside loopback, or leave --redis out (the embedded Redis then "
                               "listens on the bridge %s too)",
                               url->host, url->port, net->bridge_addr);
        return 0;
    }
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ftc_redis_t *r = ftc_redis_connect(url, &ro, err);
    if (!r)
        return err->code ? err->code : FTC_EREDIS;
    char binds[64];
    snprintf(binds, sizeof binds, "127.0.0.1 %s", net->bridge_addr);
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc_redis_cmdv(r, false, &rep, "CONFIG", "SET", "bind", binds, NULL);
    if (rc == 0)
        rc = ftc_redis_want_status(rep, "CONFIG SET bind", "OK", err);
    else
        ftc_err_set(err, rc, "--netns: CONFIG SET bind \"%s\": %s", binds, ftc_redis_errstr(r));
    ftc_redis_reply_free(rep);
    ftc_redis_close(r);
    if (rc)
        return rc;
    snprintf(node_url->host, sizeof node_url->host, "%s", net->bridge_addr);
    return 0;
}

const char *ftc_netns_addr(const ftc_netns_t *net, int i)
{
    return net && i >= 0 && i < net->n ? net->node[i].addr : "";
}

const char *ftc_netns_name(const ftc_netns_t *net, int i)
{
    return net && i >= 0 && i < net->n ? net->node[i].name : "";
}

const char *ftc_netns_veth(const ftc_netns_t *net, int i)
{
    return net && i >= 0 && i < net->n ? net->node[i].veth : "";
}

const char *ftc_netns_bridge(const ftc_netns_t *net)
{
    return net ? net->bridge : "";
}

const char *ftc_netns_bridge_addr(const ftc_netns_t *net)
{
    return net ? net->bridge_addr : "";
}

void ftc_netns_destroy(ftc_netns_t *net)
{
    if (!net)
        return;
    if (net->wfd >= 0)
        close(net->wfd);
    net->wfd = -1;
    if (net->watchdog > 0) {
        ftc_deadline_t d = ftc_deadline_in_ms(NS_CLEAN_MS);
        for (;;) {
            pid_t p = waitpid(net->watchdog, NULL, WNOHANG);
            if (p == net->watchdog || (p < 0 && errno != EINTR))
                break;
            if (ftc_deadline_expired(d)) {
                FTC_WARN("netns",
                         "the cleanup of bridge %s has not finished after %d s; it goes on "
                         "in pid %d",
                         net->bridge, NS_CLEAN_MS / 1000, (int)net->watchdog);
                break;
            }
            ftc_sleep_ms(10);
        }
    }
    ns_free(net);
}
