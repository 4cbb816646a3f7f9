/*
 * fabric.c — the libfabric transport of fabric.h: opening an RDM endpoint on
 * a chosen provider, the address vector, tagged posts that retry -FI_EAGAIN
 * while progressing, completion-queue progress (fi_cq_read, fi_cq_readerr),
 * deadline-bounded waits with fi_cancel and a bounded wait for the
 * cancellations, the sticky abort/broken states, and windowed large
 * transfers.
 */
#include "core/fabric.h"
#include "core/log.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

_Static_assert(sizeof(((ftc_fabric_req_t *)0)->prov_) >= sizeof(struct fi_context2),
               "ftc_fabric_req_t must have room for struct fi_context2");
_Static_assert(offsetof(ftc_fabric_req_t, prov_) == 0, "fi_context2 must be first");
_Static_assert(FTC_FABRIC_PEER_ANY == FI_ADDR_UNSPEC, "PEER_ANY is FI_ADDR_UNSPEC");

#define FTC__FAB_DEFAULT_PROVIDER "tcp;ofi_rxm"
#define FTC__FAB_DEFAULT_BIND "127.0.0.1"
#define FTC__FAB_WINDOW_MAX 64
#define FTC__FAB_CQ_BATCH 16
#define FTC__FAB_SPINS_BEFORE_YIELD 256
/* An aborted handle is going away: its cancel wait is cut to this. What
 * libfabric can cancel (posted receives, sends to live peers) comes back
 * within a few ms; what it cannot (a send to a dead peer) never does, and
 * the handle is then abandoned by ftc_fabric_close, not fi_close'd. */
#define FTC__FAB_ABORT_SETTLE_MS 100
/* A try post (ftc_fabric_isend_try) retries -FI_EAGAIN at most this many
 * times, each after one completion-queue read, and for at most this long. */
#define FTC__FAB_TRY_ATTEMPTS 4
#define FTC__FAB_TRY_US 1000

enum { KIND_SEND = 1, KIND_RECV = 2 };

struct ftc_fabric {
    struct fi_info *info;       /* the provider's answer we opened */
    struct fid_fabric *fabric;  /* fabric, domain, cq, av, ep: closed in reverse */
    struct fid_domain *domain;
    struct fid_cq *cq;          /* one CQ for sends and receives, tagged format */
    struct fid_av *av;          /* peers */
    struct fid_ep *ep;          /* the RDM endpoint */
    atomic_int aborted;         /* set by ftc_fabric_abort from any thread */
    const atomic_bool *abort_flag; /* the owner's stop flag (opts), or NULL */
    atomic_int broken;          /* an op could not be cancelled, or the CQ failed */
    size_t max_msg;             /* largest message; chunk of send/recv_large */
    int window;                 /* chunks in flight in send/recv_large */
    int cancel_ms;              /* bound on waiting for cancelled ops */
    size_t pending;             /* requests posted and not yet completed */
    char prov[64];              /* provider name actually opened */
    ftc_err_t err;              /* last error on this handle */
};

static int fab_health(const ftc_fabric_t *fab)
{
    if (atomic_load_explicit(&fab->aborted, memory_order_relaxed) ||
        (fab->abort_flag && atomic_load_explicit(fab->abort_flag, memory_order_relaxed)))
        return FTC_ECANCELED;
    if (atomic_load_explicit(&fab->broken, memory_order_relaxed))
        return FTC_EFABRIC;
    return 0;
}

static int health_err(ftc_fabric_t *fab, int rc)
{
    if (rc == FTC_ECANCELED)
        return ftc_err_set(&fab->err, rc, "fabric %s: aborted; close the handle", fab->prov);
    char was[FTC_ERR_MSG_MAX];
    snprintf(was, sizeof was, "%s", fab->err.code ? fab->err.msg : "earlier failure");
    return ftc_err_set(&fab->err, rc, "fabric %s: endpoint is broken (%s); close and reopen it",
                       fab->prov, was);
}

/* ---- open / close ------------------------------------------------------- */

/* Removes /dev/shm/<pid>:* whose mtime is before `before_ns` (INT64_MAX:
 * every one); the number removed. */
static int ftc__shm_remove(pid_t pid, int64_t before_ns)
{
    if (pid <= 0)
        return 0;
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "%d:", (int)pid), n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)pl))
            continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        struct stat st;
        if (before_ns != INT64_MAX &&
            (lstat(path, &st) != 0 ||
             (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec >= before_ns))
            continue; /* made or changed since: someone's live region */
        n += unlink(path) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

int ftc_fabric_shm_remove(pid_t pid)
{
    return ftc__shm_remove(pid, INT64_MAX);
}

pid_t ftc_fabric_reap(pid_t pid, int *st, int options)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(pid > 0 ? P_PID : P_ALL, pid > 0 ? (id_t)pid : 0, &si,
               WEXITED | WNOWAIT | options) != 0)
        return -1; /* errno as waitpid's: ECHILD, EINTR */
    if (si.si_pid <= 0)
        return 0; /* WNOHANG: none has exited */
    int n = ftc_fabric_shm_remove(si.si_pid);
    if (n)
        FTC_INFO("fabric", "removed %d shm region(s) /dev/shm/%d:* the exited process left", n,
                 (int)si.si_pid);
    return waitpid(si.si_pid, st, options);
}

/* When this process started, in CLOCK_REALTIME nanoseconds (0 if unknown):
 * /proc/self/stat's starttime (clock ticks since boot) moved onto the wall
 * clock through CLOCK_BOOTTIME, to a tick (10 ms). */
static int64_t ftc__proc_start_ns(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ticks = 0;
    /* after ") ": state is field 3, starttime field 22 */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                             "%*d %*d %*d %llu", &ticks) != 1)
        return 0;
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec boot, real;
    if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) || clock_gettime(CLOCK_REALTIME, &real))
        return 0;
    int64_t since_boot = (int64_t)boot.tv_sec * 1000000000 + boot.tv_nsec;
    int64_t started = (int64_t)(ticks / (unsigned long long)hz) * 1000000000 +
                      (int64_t)(ticks % (unsigned long long)hz) * (1000000000 / hz);
    return (int64_t)real.tv_sec * 1000000000 + real.tv_nsec - (since_boot - started);
}

/* libfabric's shm provider names its regions in /dev/shm after the process
 * id ("<pid>:<n>:<m>"), and a process killed with SIGKILL leaves them behind.
 * Process ids are reused (pid_max is often 32768, and a test run or a long
 * job forks thousands of ranks), and a new process that meets its
 * predecessor's region under its own name could hang or fail to open. So the
 * first shm endpoint of each process removes the regions named after its pid
 * that were last changed before the process started (a dead predecessor's):
 * not those made since, by another libfabric user in this process (a NCCL or
 * PyTorch plugin that opened shm first), which are alive. A stale region
 * changed within a clock tick (10 ms, plus a margin) of our start is kept
 * too: its pid would have had to be reused at once. */
#define FTC__SHM_START_SLACK_NS 50000000
int ftc_fabric_shm_remove_stale(pid_t pid, int64_t started_ns)
{
    /* a region's mtime is set when shm creates and sizes it (no one backdates it) */
    return started_ns > 0 ? ftc__shm_remove(pid, started_ns - FTC__SHM_START_SLACK_NS) : 0;
}

static void ftc__shm_stale_regions(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static pid_t done_for; /* per process: a forked child has another pid */
    pid_t me = getpid();
    pthread_mutex_lock(&mu);
    if (done_for != me) {
        done_for = me;
        int n = ftc_fabric_shm_remove_stale(me, ftc__proc_start_ns());
        if (n)
            FTC_INFO("fabric", "removed %d stale shm region(s) a killed process with our pid "
                     "(%d) left", n, (int)me);
    }
    pthread_mutex_unlock(&mu);
}

static bool is_shm(const char *prov)
{
    return strncmp(prov, "shm", 3) == 0;
}

/* shm's fi_close of an endpoint is what shm_unlink's its region; a broken
 * endpoint that ftc_fabric_close abandons is never fi_close'd, so its region
 * ("<pid>:<uid>:<index>", the address after "fi_shm://") would outlive a
 * process that exits normally. Remove the name here instead: the mapping stays ours
 * (part of the bounded leak of an abandoned endpoint), a peer that mapped it
 * keeps it until it unmaps, and a new peer cannot open it, as after a close.
 * Only a name of ours ("<our pid>:...") is removed. */
static void shm_unlink_region(ftc_fabric_t *fab)
{
    if (!is_shm(fab->prov) || !fab->ep)
        return;
    char addr[FTC_FABRIC_ADDR_MAX + 1];
    size_t len = FTC_FABRIC_ADDR_MAX;
    if (fi_getname(&fab->ep->fid, addr, &len) != 0 || len > FTC_FABRIC_ADDR_MAX) {
        FTC_WARN("fabric", "abandoned shm endpoint: no address (fi_getname); its region may "
                           "stay in /dev/shm until a process with our pid starts an endpoint");
        return;
    }
    addr[len] = 0;
    const char *name = strstr(addr, "://");
    name = name ? name + 3 : addr;
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "%d:", (int)getpid());
    if (strncmp(name, prefix, (size_t)pl) || strchr(name, '/')) {
        FTC_WARN("fabric", "abandoned shm endpoint: address '%s' is not a region name of this "
                           "process (%s...); left in place", name, prefix);
        return;
    }
    if (shm_unlink(name) != 0 && errno != ENOENT)
        FTC_WARN("fabric", "abandoned shm endpoint: shm_unlink(%s): %s", name, strerror(errno));
}

int ftc_fabric_open(const ftc_fabric_opts_t *opts, ftc_fabric_t **out, ftc_err_t *err)
{
    ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
    *out = NULL;
    if (opts) {
        if (opts->size < offsetof(ftc_fabric_opts_t, cancel_timeout_ms) + sizeof(int) ||
            opts->version != FTC_FABRIC_OPTS_VERSION)
            return ftc_err_set(err, FTC_EINVAL,
                               "fabric: options size %zu / version %d not understood "
                               "(use FTC_FABRIC_OPTS_INIT)",
                               opts->size, opts->version);
        /* a caller built against an older, shorter struct: the rest stays default */
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
        o.size = sizeof o;
    }
    if (o.max_msg == 0 || o.window < 1 || o.window > FTC__FAB_WINDOW_MAX ||
        o.cancel_timeout_ms < 0)
        return ftc_err_set(err, FTC_EINVAL,
                           "fabric: bad options (max_msg %zu must be > 0, window %d in 1..%d, "
                           "cancel_timeout_ms %d >= 0)",
                           o.max_msg, o.window, FTC__FAB_WINDOW_MAX, o.cancel_timeout_ms);
    const char *prov = o.provider;
    const char *env = getenv("FI_PROVIDER");
    if (!prov || !*prov)
        prov = (env && *env) ? env : FTC__FAB_DEFAULT_PROVIDER;
    /* FTC_FABRIC_BIND: the address of this process's network, when the
     * caller named none (`ftc run --netns` sets it in each node's namespace) */
    const char *bind_env = getenv("FTC_FABRIC_BIND");
    const char *node = o.bind_addr            ? o.bind_addr
                       : bind_env && *bind_env ? bind_env
                                               : FTC__FAB_DEFAULT_BIND;
    if (is_shm(prov) || !*node)
        node = NULL;
    if (is_shm(prov))
        ftc__shm_stale_regions();

    ftc_fabric_t *fab = calloc(1, sizeof *fab);
    struct fi_info *hints = fi_allocinfo();
    int rc = 0;
    if (!fab || !hints) {
        rc = ftc_err_set(err, FTC_ENOMEM, "fabric: out of memory");
        goto undo_alloc;
    }
    atomic_init(&fab->aborted, 0);
    atomic_init(&fab->broken, 0);
    fab->max_msg = o.max_msg;
    fab->window = o.window;
    fab->cancel_ms = o.cancel_timeout_ms;
    fab->abort_flag = o.abort_flag;
    snprintf(fab->prov, sizeof fab->prov, "%s", prov);

    hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    /* Modes that only matter for RMA targets, which we never expose: saying we
     * support them keeps providers that want them (shm: VIRT_ADDR) eligible.
     * FI_MR_LOCAL is not among them: we never register send/recv buffers. */
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    /* send_large's chunks share a tag: they must match receives in order. */
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name = strdup(prov);
    if (!hints->fabric_attr->prov_name) {
        rc = ftc_err_set(err, FTC_ENOMEM, "fabric: out of memory");
        goto undo_alloc;
    }

    int frc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, NULL,
                         node ? FI_SOURCE : 0, hints, &fab->info);
    if (frc != 0) {
        /* Tell "absent" from "present but unsuitable": ask again with only the
         * provider's name. */
        struct fi_info *bare = fi_allocinfo(), *any = NULL;
        bool present = false;
        if (bare) {
            bare->fabric_attr->prov_name = strdup(prov);
            present = bare->fabric_attr->prov_name &&
                      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0,
                                 bare, &any) == 0;
            fi_freeinfo(any);
            fi_freeinfo(bare);
        }
        if (!present)
            rc = ftc_err_set(err, FTC_EUNSUPPORTED,
                             "fabric: provider '%s' is not available here (fi_getinfo: %s)%s%s; "
                             "`fi_info -l` lists the providers",
                             prov, fi_strerror(-frc), env && *env ? "; FI_PROVIDER=" : "",
                             env && *env ? env : "");
        else
            rc = ftc_err_set(err, FTC_EUNSUPPORTED,
                             "fabric: provider '%s' has no RDM endpoint with tagged messages, "
                             "directed receive and send-after-send order%s%s (fi_getinfo: %s)",
                             prov, node ? " on address " : "", node ? node : "",
                             fi_strerror(-frc));
        goto undo_alloc;
    }
    struct fi_info *info = fab->info;
    snprintf(fab->prov, sizeof fab->prov, "%s", info->fabric_attr->prov_name);
    if (info->ep_attr->max_msg_size < fab->max_msg) {
        rc = ftc_err_set(err, FTC_EINVAL, "fabric %s: max_msg %zu exceeds the provider's %zu",
                         fab->prov, fab->max_msg, info->ep_attr->max_msg_size);
        goto undo_info;
    }

    const char *what;
    what = "fi_fabric";
    if ((frc = fi_fabric(info->fabric_attr, &fab->fabric, NULL)) != 0)
        goto fail_fi;
    what = "fi_domain";
    if ((frc = fi_domain(fab->fabric, info, &fab->domain, NULL)) != 0)
        goto fail_fi;
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    what = "fi_cq_open";
    if ((frc = fi_cq_open(fab->domain, &cq_attr, &fab->cq, NULL)) != 0)
        goto fail_fi;
    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};
    what = "fi_av_open";
    if ((frc = fi_av_open(fab->domain, &av_attr, &fab->av, NULL)) != 0)
        goto fail_fi;
    what = "fi_endpoint";
    if ((frc = fi_endpoint(fab->domain, info, &fab->ep, NULL)) != 0)
        goto fail_fi;
    what = "fi_ep_bind(av)";
    if ((frc = fi_ep_bind(fab->ep, &fab->av->fid, 0)) != 0)
        goto fail_fi;
    what = "fi_ep_bind(cq)";
    if ((frc = fi_ep_bind(fab->ep, &fab->cq->fid, FI_TRANSMIT | FI_RECV)) != 0)
        goto fail_fi;
    what = "fi_enable";
    if ((frc = fi_enable(fab->ep)) != 0)
        goto fail_fi;
    fi_freeinfo(hints);
    *out = fab;
    return 0;

fail_fi:
    rc = ftc_err_set(err, FTC_EFABRIC, "fabric %s: %s: %s", fab->prov, what, fi_strerror(-frc));
    ftc_fabric_close(fab);
    fi_freeinfo(hints);
    return rc;
undo_info:
    fi_freeinfo(fab->info);
undo_alloc:
    fi_freeinfo(hints);
    free(fab);
    return rc;
}

/* An abandoned tcp endpoint's sockets stay open (no fi_close), and its
 * listening socket keeps accepting connections into the kernel's backlog that
 * nobody serves: a peer that still has this address (or rxm reconnecting to
 * it) then waits for its transfer's whole deadline, or blocks in connect()
 * once the backlog is full. Shutting down every socket bound to our address
 * (the listener and the connections it accepted share its local port) makes
 * those peers fail at once instead. shutdown(), not close(): the descriptors
 * stay libfabric's, so no number is reused under it. */
void ftc_fabric_shutdown_sockets(ftc_fabric_t *fab)
{
    if (!fab)
        return;
    if (!strstr(fab->prov, "tcp"))
        return;
    struct sockaddr_storage me;
    size_t len = sizeof me;
    if (!fab->ep || fi_getname(&fab->ep->fid, &me, &len) != 0 ||
        (me.ss_family != AF_INET && me.ss_family != AF_INET6))
        return;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        struct stat st;
        if (*end || fd < 3 || fd == dirfd(d) || fstat((int)fd, &st) || !S_ISSOCK(st.st_mode))
            continue;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        if (getsockname((int)fd, (struct sockaddr *)&sa, &sl) || sa.ss_family != me.ss_family)
            continue;
        bool same = me.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&sa)->sin_port ==
                                  ((struct sockaddr_in *)&me)->sin_port &&
                              ((struct sockaddr_in *)&sa)->sin_addr.s_addr ==
                                  ((struct sockaddr_in *)&me)->sin_addr.s_addr
                        : ((struct sockaddr_in6 *)&sa)->sin6_port ==
                                  ((struct sockaddr_in6 *)&me)->sin6_port &&
                              !memcmp(&((struct sockaddr_in6 *)&sa)->sin6_addr,
                                      &((struct sockaddr_in6 *)&me)->sin6_addr,
                                      sizeof(struct in6_addr));
        if (same && shutdown((int)fd, SHUT_RDWR) == 0)
            n++;
    }
    closedir(d);
    if (n)
        FTC_INFO("fabric", "shut down %d socket(s) of the abandoned endpoint, so peers that "
                           "still use its address are refused instead of waiting", n);
}

void ftc_fabric_close(ftc_fabric_t *fab)
{
    if (!fab)
        return;
    if (atomic_load_explicit(&fab->broken, memory_order_relaxed) && fab->pending > 0) {
        /* A broken endpoint still has operations libfabric could not cancel.
         * libfabric 1.17 (rxm) crashes in fi_close when some of them are
         * receives (tests/ckpt/test_cutlink.sh reproduces it), so a broken
         * endpoint is abandoned instead: its libfabric objects stay allocated
         * (a bounded leak per broken endpoint; suppressed for LeakSanitizer in
         * tests/lsan.supp) and never touch our buffers again, since their
         * peer is gone. What outlives the process is removed: a tcp
         * endpoint's sockets are shut down, an shm endpoint's region name
         * unlinked. */
        FTC_WARN("fabric", "abandoning a broken %s endpoint without fi_close (libfabric cannot "
                           "close it safely)", fab->prov);
        ftc_fabric_shutdown_sockets(fab);
        shm_unlink_region(fab);
        fi_freeinfo(fab->info);
        free(fab);
        return;
    }
    /* The endpoint first: once it is closed libfabric holds no buffer of ours. */
    if (fab->ep)
        fi_close(&fab->ep->fid);
    if (fab->av)
        fi_close(&fab->av->fid);
    if (fab->cq)
        fi_close(&fab->cq->fid);
    if (fab->domain)
        fi_close(&fab->domain->fid);
    if (fab->fabric)
        fi_close(&fab->fabric->fid);
    fi_freeinfo(fab->info);
    free(fab);
}

void ftc_fabric_abort(ftc_fabric_t *fab)
{
    if (fab)
        atomic_store_explicit(&fab->aborted, 1, memory_order_relaxed);
}

int ftc_fabric_health(const ftc_fabric_t *fab)
{
    return fab_health(fab);
}

const char *ftc_fabric_provider(const ftc_fabric_t *fab)
{
    return fab->prov;
}

size_t ftc_fabric_max_msg(const ftc_fabric_t *fab)
{
    return fab->max_msg;
}

const char *ftc_fabric_errmsg(const ftc_fabric_t *fab)
{
    return fab->err.msg;
}

int ftc_fabric_getname(ftc_fabric_t *fab, void *addr, size_t *len)
{
    size_t room = *len;
    int frc = fi_getname(&fab->ep->fid, addr, len);
    if (frc == -FI_ETOOSMALL)
        return ftc_err_set(&fab->err, FTC_ERANGE,
                           "fabric %s: address needs %zu bytes, room for %zu", fab->prov, *len,
                           room);
    if (frc != 0)
        return ftc_err_set(&fab->err, FTC_EFABRIC, "fabric %s: fi_getname: %s", fab->prov,
                           fi_strerror(-frc));
    return 0;
}

int ftc_fabric_peer_add(ftc_fabric_t *fab, const void *addr, size_t len, ftc_fabric_peer_t *peer)
{
    if (!addr || len == 0 || len > FTC_FABRIC_ADDR_MAX)
        return ftc_err_set(&fab->err, FTC_EINVAL,
                           "fabric %s: a peer address of %zu bytes (%s); give the bytes and "
                           "length ftc_fabric_getname produced (1..%d)",
                           fab->prov, len, addr ? "bad length" : "NULL", FTC_FABRIC_ADDR_MAX);
    /* fi_av_insert takes no length: it reads a whole address of the
     * provider's format (a sockaddr by its family, a string up to its NUL).
     * So it reads a zero-padded copy, never past the caller's len, and a
     * socket address must be as long as its family says. */
    uint8_t copy[FTC_FABRIC_ADDR_MAX + 8];
    memset(copy, 0, sizeof copy);
    memcpy(copy, addr, len);
    uint32_t fmt = fab->info->addr_format;
    if (fmt == FI_SOCKADDR || fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6) {
        sa_family_t fam = 0;
        if (len >= sizeof fam)
            memcpy(&fam, copy, sizeof fam);
        size_t need = fam == AF_INET    ? sizeof(struct sockaddr_in)
                      : fam == AF_INET6 ? sizeof(struct sockaddr_in6)
                                        : 0;
        if (!need || len < need)
            return ftc_err_set(&fab->err, FTC_EINVAL,
                               "fabric %s: a peer address of %zu bytes is not an IPv4 or IPv6 "
                               "socket address (family %d needs %zu bytes); give the bytes "
                               "ftc_fabric_getname produced",
                               fab->prov, len, (int)fam, need);
    }
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(fab->av, copy, 1, &a, 0, NULL);
    if (n != 1 || a == FI_ADDR_NOTAVAIL)
        return ftc_err_set(&fab->err, n < 0 ? FTC_EFABRIC : FTC_EINVAL,
                           "fabric %s: fi_av_insert of a %zu-byte address: %s", fab->prov, len,
                           n < 0 ? fi_strerror(-n) : "address not accepted");
    *peer = a;
    return 0;
}

int ftc_fabric_peer_remove(ftc_fabric_t *fab, ftc_fabric_peer_t peer)
{
    fi_addr_t a = peer;
    int frc = fi_av_remove(fab->av, &a, 1, 0);
    if (frc != 0)
        return ftc_err_set(&fab->err, FTC_EFABRIC, "fabric %s: fi_av_remove of peer %llu: %s",
                           fab->prov, (unsigned long long)peer, fi_strerror(-frc));
    return 0;
}

/* ---- progress ----------------------------------------------------------- */

static void complete(ftc_fabric_t *fab, ftc_fabric_req_t *req, int status, size_t len,
                     uint64_t tag)
{
    assert(req->state == FTC_FABRIC_REQ_PENDING);
    req->state = FTC_FABRIC_REQ_DONE;
    req->status = status;
    if (req->kind_ == KIND_RECV)
        req->len = len;
    req->tag_out = tag;
    fab->pending--;
}

/* Reads the completion queue once. Returns the number of completions handled
 * (0 if none), or FTC_EFABRIC if the queue itself failed (then broken). */
static int progress(ftc_fabric_t *fab)
{
    struct fi_cq_tagged_entry e[FTC__FAB_CQ_BATCH];
    ssize_t n = fi_cq_read(fab->cq, e, FTC__FAB_CQ_BATCH);
    if (n > 0) {
        for (ssize_t i = 0; i < n; i++)
            complete(fab, e[i].op_context, 0, e[i].len, e[i].tag);
        return (int)n;
    }
    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof ee);
        ssize_t r = fi_cq_readerr(fab->cq, &ee, 0);
        if (r == -FI_EAGAIN)
            return 0;
        if (r != 1) {
            n = r < 0 ? r : -FI_EOTHER;
            goto cq_failed;
        }
        ftc_fabric_req_t *req = ee.op_context;
        if (!req) {
            /* an error of the provider's own (ofi_rxm writes such entries
             * without a context when its internal progress fails): no
             * operation to complete, the endpoint is not trustworthy any more */
            atomic_store(&fab->broken, 1);
            return ftc_err_set(&fab->err, FTC_EFABRIC, "fabric %s: the provider reported an "
                               "error of no operation: %s (provider errno %d)", fab->prov,
                               fi_strerror(ee.err), ee.prov_errno);
        }
        int status;
        if (ee.err == FI_ECANCELED) {
            /* the canceller left its reason in status */
            status = req->status ? req->status : FTC_ECANCELED;
        } else {
            char pbuf[256] = "";
            const char *ptext = fi_cq_strerror(fab->cq, ee.prov_errno, ee.err_data, pbuf,
                                               sizeof pbuf);
            status = ee.err == FI_ETRUNC ? FTC_ETRUNC : FTC_EFABRIC;
            req->prov_errno_ = ee.prov_errno;
            ftc_err_set(&fab->err, status,
                        "fabric %s: %s of %zu bytes (tag 0x%llx) failed: %s (provider errno %d: "
                        "%s)",
                        fab->prov, req->kind_ == KIND_SEND ? "send" : "recv",
                        req->kind_ == KIND_SEND ? req->len : ee.olen + ee.len,
                        (unsigned long long)ee.tag, fi_strerror(ee.err), ee.prov_errno,
                        ptext ? ptext : "?");
        }
        complete(fab, req, status, ee.len, ee.tag);
        return 1;
    }
cq_failed:
    atomic_store(&fab->broken, 1);
    return ftc_err_set(&fab->err, FTC_EFABRIC, "fabric %s: fi_cq_read: %s", fab->prov,
                       fi_strerror((int)-n));
}

/* Spins on the CQ while it is empty, yielding the CPU every few hundred
 * empty polls so that a peer on the same cores (loopback) can run. */
static void idle(int got, int *spins)
{
    if (got > 0) {
        *spins = 0;
        return;
    }
    if (++*spins >= FTC__FAB_SPINS_BEFORE_YIELD) {
        *spins = 0;
        sched_yield();
    }
}

static bool all_done(ftc_fabric_req_t *const *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->state == FTC_FABRIC_REQ_PENDING)
            return false;
    return true;
}

/* Progresses until every request is done (0), or returns FTC_ECANCELED
 * (abort), FTC_EFABRIC (broken) or FTC_ETIMEDOUT without cancelling anything. */
static int wait_raw(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n,
                    ftc_deadline_t deadline)
{
    int spins = 0;
    for (;;) {
        if (all_done(reqs, n))
            return 0;
        int h = fab_health(fab);
        if (h < 0)
            return h;
        if (ftc_deadline_expired(deadline))
            return FTC_ETIMEDOUT;
        int got = progress(fab);
        if (got < 0)
            return got;
        idle(got, &spins);
    }
}


/* Cancels the pending requests (their status becomes `reason` unless they
 * complete anyway) and waits up to cancel_ms for libfabric to hand them back.
 * Ignores the abort flag: this is the bounded cleanup an abort needs. Returns
 * 0, or FTC_EFABRIC after marking the handle broken if one is still pending. */
static int settle(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n, int reason)
{
    /* A broken handle never reads its CQ again: requests it gave up on may be
     * the internal ones of a blocking call that has returned (on a stack frame
     * that is gone), and a completion for them would be written there. */
    if (atomic_load_explicit(&fab->broken, memory_order_relaxed)) {
        if (all_done(reqs, n))
            return 0;
        return health_err(fab, FTC_EFABRIC);
    }
    size_t npend = 0;
    for (size_t i = 0; i < n; i++) {
        ftc_fabric_req_t *r = reqs[i];
        if (!r || r->state != FTC_FABRIC_REQ_PENDING)
            continue;
        r->status = reason;
        /* -FI_ENOENT: already completed or not cancellable; progress tells. */
        (void)fi_cancel(&fab->ep->fid, r);
        npend++;
    }
    if (!npend)
        return 0;
    int bound = fab->cancel_ms;
    if (fab_health(fab) == FTC_ECANCELED && bound > FTC__FAB_ABORT_SETTLE_MS)
        bound = FTC__FAB_ABORT_SETTLE_MS;
    ftc_deadline_t until = ftc_deadline_in_ms((uint64_t)bound);
    int spins = 0;
    while (!all_done(reqs, n) && !ftc_deadline_expired(until)) {
        int got = progress(fab);
        if (got < 0)
            break;
        idle(got, &spins);
    }
    if (all_done(reqs, n))
        return 0;
    size_t left = 0, sends = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->state == FTC_FABRIC_REQ_PENDING)
            left++, sends += reqs[i]->kind_ == KIND_SEND;
    atomic_store(&fab->broken, 1);
    return ftc_err_set(&fab->err, FTC_EFABRIC,
                       "fabric %s: %zu operation(s) (%zu sends) not cancelled within %d ms "
                       "(a send to a dead or unreachable peer cannot be cancelled); the "
                       "endpoint is broken and keeps their buffers until ftc_fabric_close",
                       fab->prov, left, sends, bound);
}

int ftc_fabric_cancel(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n)
{
    return settle(fab, reqs, n, FTC_ECANCELED);
}

/* The reason a wait gave up, as the handle's error (keeps a "broken" detail
 * from settle when there is one). */
static int giveup(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n, int why,
                  const char *what)
{
    int s = settle(fab, reqs, n, why);
    if (s < 0) {
        ftc_err_wrap(&fab->err, "%s: %s", what, ftc_strerror(why));
        return why;
    }
    if (why == FTC_ETIMEDOUT)
        return ftc_err_set(&fab->err, why,
                           "fabric %s: %s: deadline passed (peer dead, slow or not posting?); "
                           "outstanding operations were cancelled",
                           fab->prov, what);
    if (why == FTC_ECANCELED)
        return ftc_err_set(&fab->err, why, "fabric %s: %s: aborted", fab->prov, what);
    return why; /* FTC_EFABRIC: progress() already said why */
}

/* ---- posting -------------------------------------------------------------- */

/* Posts one tagged send or receive. -FI_EAGAIN is retried, progressing in
 * between, until `deadline` (FTC_ETIMEDOUT); with try_only a few times
 * (FTC__FAB_TRY_ATTEMPTS) within FTC__FAB_TRY_US at most (FTC_EAGAIN). A
 * failed post never leaves req PENDING: a try post leaves it as the caller
 * handed it in, a blocking one zeroed (IDLE). */
static int post(ftc_fabric_t *fab, ftc_fabric_req_t *req, int kind, ftc_fabric_peer_t peer,
                uint64_t tag, uint64_t ignore, void *buf, size_t len, ftc_deadline_t deadline,
                bool try_only)
{
    int h = fab_health(fab);
    if (h < 0)
        return health_err(fab, h);
    if (req->state == FTC_FABRIC_REQ_PENDING)
        return ftc_err_set(&fab->err, FTC_EINVAL,
                           "fabric %s: request is still pending (or was never zeroed)",
                           fab->prov);
    if (len > fab->max_msg)
        return ftc_err_set(&fab->err, FTC_EINVAL,
                           "fabric %s: %s of %zu bytes exceeds max_msg %zu (use the _large "
                           "calls or chunk it)",
                           fab->prov, kind == KIND_SEND ? "send" : "recv", len, fab->max_msg);
    /* a try post that fails hands the request back as it found it (the
     * blocking one leaves it zeroed, IDLE, as it always did) */
    ftc_fabric_req_t before = *req;
    memset(req, 0, sizeof *req);
    req->kind_ = kind;
    req->len = len;
    req->fab_ = fab;
    int spins = 0, tries = 0;
    ftc_deadline_t until = deadline;
    if (try_only)
        until.at_ns = ftc_now_ns() + (uint64_t)FTC__FAB_TRY_US * 1000u;
    for (;;) {
        ssize_t r = kind == KIND_SEND
                        ? fi_tsend(fab->ep, buf, len, NULL, peer, tag, req)
                        : fi_trecv(fab->ep, buf, len, NULL, peer, tag, ignore, req);
        if (r == 0) {
            req->state = FTC_FABRIC_REQ_PENDING;
            fab->pending++;
            return 0;
        }
        if (r != -FI_EAGAIN) {
            if (try_only)
                *req = before;
            return ftc_err_set(&fab->err, FTC_EFABRIC,
                               "fabric %s: fi_t%s of %zu bytes to peer %llu: %s", fab->prov,
                               kind == KIND_SEND ? "send" : "recv", len,
                               (unsigned long long)peer, fi_strerror((int)-r));
        }
        /* rxm is connecting or a queue is full: progress, then retry. */
        int got = progress(fab);
        if (got < 0) {
            if (try_only)
                *req = before;
            return got;
        }
        if ((h = fab_health(fab)) < 0) {
            if (try_only)
                *req = before;
            return health_err(fab, h);
        }
        if (try_only && (++tries >= FTC__FAB_TRY_ATTEMPTS || ftc_deadline_expired(until))) {
            *req = before;
            return ftc_err_set(&fab->err, FTC_EAGAIN,
                               "fabric %s: could not post a %s to peer %llu now (-FI_EAGAIN: "
                               "connection not established or queue full); retry later",
                               fab->prov, kind == KIND_SEND ? "send" : "recv",
                               (unsigned long long)peer);
        }
        if (!try_only && ftc_deadline_expired(until))
            return ftc_err_set(&fab->err, FTC_ETIMEDOUT,
                               "fabric %s: could not post a %s to peer %llu before the deadline "
                               "(-FI_EAGAIN: connection not established?)",
                               fab->prov, kind == KIND_SEND ? "send" : "recv",
                               (unsigned long long)peer);
        idle(got, &spins);
    }
}

int ftc_fabric_isend(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                     uint64_t tag, const void *buf, size_t len, ftc_deadline_t deadline)
{
    /* fi_tsend takes a non-const pointer; it never writes through it. */
    return post(fab, req, KIND_SEND, peer, tag, 0, (void *)(uintptr_t)buf, len, deadline, false);
}

int ftc_fabric_irecv(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                     uint64_t tag, uint64_t ignore, void *buf, size_t cap,
                     ftc_deadline_t deadline)
{
    return post(fab, req, KIND_RECV, peer, tag, ignore, buf, cap, deadline, false);
}

int ftc_fabric_isend_try(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                         uint64_t tag, const void *buf, size_t len)
{
    return post(fab, req, KIND_SEND, peer, tag, 0, (void *)(uintptr_t)buf, len, FTC_DEADLINE_NONE,
                true);
}

int ftc_fabric_irecv_try(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                         uint64_t tag, uint64_t ignore, void *buf, size_t cap)
{
    return post(fab, req, KIND_RECV, peer, tag, ignore, buf, cap, FTC_DEADLINE_NONE,
                true);
}

int ftc_fabric_test(ftc_fabric_t *fab, ftc_fabric_req_t *req)
{
    if (req->state == FTC_FABRIC_REQ_PENDING) {
        int h = fab_health(fab);
        if (h < 0)
            return health_err(fab, h);
        int got = progress(fab);
        if (got < 0)
            return got;
    }
    return req->state == FTC_FABRIC_REQ_DONE;
}

static int first_failure(ftc_fabric_req_t *const *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->state == FTC_FABRIC_REQ_DONE && reqs[i]->status < 0)
            return reqs[i]->status;
    return 0;
}

int ftc_fabric_wait(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n,
                    ftc_deadline_t deadline)
{
    int rc = wait_raw(fab, reqs, n, deadline);
    if (rc < 0)
        return giveup(fab, reqs, n, rc, "wait");
    return first_failure(reqs, n);
}

/* ---- blocking ----------------------------------------------------------- */

int ftc_fabric_send(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, const void *buf,
                    size_t len, ftc_deadline_t deadline)
{
    ftc_fabric_req_t req, *rp = &req;
    memset(&req, 0, sizeof req);
    int rc = ftc_fabric_isend(fab, &req, peer, tag, buf, len, deadline);
    if (rc < 0)
        return rc;
    rc = wait_raw(fab, &rp, 1, deadline);
    if (rc < 0)
        return giveup(fab, &rp, 1, rc, "send");
    return req.status;
}

int ftc_fabric_recv(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, uint64_t ignore,
                    void *buf, size_t cap, size_t *got, uint64_t *tag_out,
                    ftc_deadline_t deadline)
{
    ftc_fabric_req_t req, *rp = &req;
    memset(&req, 0, sizeof req);
    int rc = ftc_fabric_irecv(fab, &req, peer, tag, ignore, buf, cap, deadline);
    if (rc < 0)
        return rc;
    rc = wait_raw(fab, &rp, 1, deadline);
    if (rc < 0)
        return giveup(fab, &rp, 1, rc, "recv");
    if (got)
        *got = req.len;
    if (tag_out)
        *tag_out = req.tag_out;
    return req.status;
}

/* send_large / recv_large: chunk i covers [i*max_msg, min(len, (i+1)*max_msg)),
 * at most `window` posted at a time; we wait on the oldest, others complete
 * in the background of the same progress loop. There are len / max_msg + 1
 * chunks: the last is always shorter than max_msg (empty when len is a
 * multiple of it, or 0), so it marks the end. A receiver expecting less than
 * was sent then gets a longer message in its short last chunk instead of
 * returning a prefix as if it were all, and one expecting more meets the
 * sender's short end early: either is FTC_EPROTO at once, naming both
 * lengths.
 *
 * Every receive is posted with room for a whole chunk (the short last one
 * into `spare`, copied into place), so a sender that sent more is never a
 * truncated receive: libfabric 1.17's shm spins inside fi_cq_read
 * truncating a large message (past any deadline) and rxm stalls truncating
 * a rendezvous one into 0 bytes. The receiver then takes the rest of the
 * sender's chunks, up to its short end (drain), so that the sender's sends
 * complete: a rendezvous send nobody receives cannot be cancelled, and its
 * sender would wait its whole deadline and lose its endpoint. */
static int drain_large(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, uint8_t *scratch,
                       size_t *sent, ftc_deadline_t deadline)
{
    for (;;) {
        ftc_fabric_req_t req, *rp = &req;
        memset(&req, 0, sizeof req);
        int rc = post(fab, &req, KIND_RECV, peer, tag, 0, scratch, fab->max_msg, deadline, false);
        if (rc < 0)
            return rc;
        rc = wait_raw(fab, &rp, 1, deadline);
        if (rc < 0)
            return giveup(fab, &rp, 1, rc, "recv_large (taking the rest of a longer message)");
        if (req.status < 0)
            return req.status;
        *sent += req.len;
        if (req.len < fab->max_msg)
            return 0;
    }
}

static int large(ftc_fabric_t *fab, int kind, ftc_fabric_peer_t peer, uint64_t tag, uint8_t *buf,
                 size_t len, ftc_deadline_t deadline)
{
    const size_t chunk = fab->max_msg;
    const size_t nchunks = len / chunk + 1;
    const size_t win = (size_t)fab->window;
    ftc_fabric_req_t reqs[FTC__FAB_WINDOW_MAX];
    ftc_fabric_req_t *ptrs[FTC__FAB_WINDOW_MAX];
    const char *what = kind == KIND_SEND ? "send_large" : "recv_large";
    uint8_t *spare = NULL; /* recv: room for a whole chunk for the short last one */
    if (kind == KIND_RECV && (len % chunk || !len)) {
        spare = malloc(chunk);
        if (!spare)
            return ftc_err_set(&fab->err, FTC_ENOMEM,
                               "fabric %s: recv_large: no memory for a %zu-byte chunk buffer",
                               fab->prov, chunk);
    }
    for (size_t i = 0; i < win; i++) {
        reqs[i].state = FTC_FABRIC_REQ_IDLE;
        ptrs[i] = &reqs[i];
    }
    size_t posted = 0, done = 0;
    int rc = 0;
    while (done < nchunks) {
        while (posted < nchunks && posted - done < win) {
            size_t off = posted * chunk;
            size_t clen = len - off < chunk ? len - off : chunk;
            uint8_t *cbuf = buf + off;
            if (kind == KIND_RECV && clen < chunk) {
                /* the short end: room for a whole chunk (see above); the
                 * empty end after whole chunks uses the start of buf */
                cbuf = clen || !len ? spare : buf;
                clen = chunk;
            }
            rc = post(fab, &reqs[posted % win], kind, peer, tag, 0, cbuf, clen, deadline, false);
            if (rc < 0)
                goto fail;
            posted++;
        }
        ftc_fabric_req_t *oldest = &reqs[done % win];
        rc = wait_raw(fab, &oldest, 1, deadline);
        if (rc < 0) {
            rc = giveup(fab, ptrs, win, rc, what);
            ftc_err_wrap(&fab->err, "%zu of %zu bytes done", done * chunk, len);
            free(spare);
            return rc;
        }
        if (oldest->status < 0) {
            rc = oldest->status;
            goto fail;
        }
        size_t off = done * chunk;
        size_t want = len - off < chunk ? len - off : chunk;
        if (kind == KIND_RECV && oldest->len != want) {
            /* a chunk shorter than max_msg is the sender's last: it sent
             * off + that; a whole one where we expected our end means more
             * is coming, taken (and counted) until the sender's end */
            size_t sent = off + oldest->len;
            int d = 0;
            if (oldest->len == chunk)
                d = drain_large(fab, peer, tag, spare ? spare : buf, &sent, deadline);
            if (d < 0)
                ftc_err_wrap(&fab->err,
                             "fabric %s: recv_large of %zu bytes: the sender sent at least %zu "
                             "(sender's length or max_msg differs); taking the rest",
                             fab->prov, len, sent);
            else
                ftc_err_set(&fab->err, FTC_EPROTO,
                            "fabric %s: recv_large of %zu bytes: the sender sent %zu (chunk %zu "
                            "has %zu bytes, expected %zu; sender's length or max_msg differs)",
                            fab->prov, len, sent, done, oldest->len, want);
            rc = FTC_EPROTO;
            goto fail;
        }
        if (kind == KIND_RECV && want && want < chunk)
            memcpy(buf + off, spare, want);
        done++;
    }
    free(spare);
    return 0;
fail:
    /* a failed post or chunk: cancel what is still in flight, keep the first error */
    {
        ftc_err_t keep = fab->err;
        int s = settle(fab, ptrs, win, FTC_ECANCELED);
        if (s == 0)
            fab->err = keep;
    }
    free(spare);
    return ftc_err_wrap(&fab->err, "%s: %zu of %zu bytes done", what,
                        (done * chunk < len ? done * chunk : len), len);
}

int ftc_fabric_send_large(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag,
                          const void *buf, size_t len, ftc_deadline_t deadline)
{
    return large(fab, KIND_SEND, peer, tag, (uint8_t *)(uintptr_t)buf, len, deadline);
}

int ftc_fabric_recv_large(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, void *buf,
                          size_t len, ftc_deadline_t deadline)
{
    return large(fab, KIND_RECV, peer, tag, buf, len, deadline);
}
