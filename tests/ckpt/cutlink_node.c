/*
 * cutlink_node.c — one side of tests/ckpt/test_cutlink.sh: a replication
 * engine (ckpt/replica.h) on a tcp;ofi_rxm endpoint bound to a given address,
 * run inside a network namespace whose link the script cuts.
 *
 *   cutlink_node serve DIR BIND [options]    node 1: holds replicas, serves
 *                                            until DIR/stop exists
 *   cutlink_node push  DIR BIND [options]    node 0: pushes one shard to node 1
 *   cutlink_node fetch DIR BIND [options]    node 0: pushes one shard to node 1
 *                                            (link intact), then fetches it back
 *
 * Options: --job NAME (slot names, unique per run), --mib N (shard size, 256),
 * --deadline-ms N (of the measured push or fetch, 5000), --mark-mib N (16),
 * --wait-cut-ms N (30000), --max-s N (serve: backstop lifetime, 170).
 *
 * Files in DIR (the two processes share nothing else): serve.addr and
 * client.addr carry the endpoint addresses (written to a temporary name and
 * renamed). The client creates DIR/started once the measured transfer has
 * moved --mark-mib MiB, then stops progressing (so nothing moves: the
 * providers progress manually) until the script has cut the link and created
 * DIR/cut; then it progresses again until the transfer ends. The transfer's
 * deadline was set when it started, so the time it takes shows whether the
 * cut reached the deadline. The client prints one line:
 *
 *   CUTLINK op=push rc=FTC_ETIMEDOUT ms=5012 after_cut_ms=4791 deadline_ms=5000
 *           moved_mib=20 match=-1 health=FTC_EFABRIC detail="..."
 *
 * (one line; match: 1 when a completed transfer is verified and equal, 0 when
 * not, -1 when it did not complete), then closes the engine and the endpoint
 * and prints "CUTLINK_CLOSED op=push close_ms=N". The server prints
 * "CUTLINK op=serve held=0|1 step=S match=0|1|-1 received_mib=N health=H"
 * and then "CUTLINK_CLOSED op=serve close_ms=N". Every wait is bounded;
 * exit status 0 means the outcome was printed (the script judges it), 2 a
 * setup failure, 3 a transfer that outlived its deadline by 60 s (a hang).
 */
#include "ckpt/replica.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/clock.h"
#include "core/fabric.h"
#include "ftc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB ((uint64_t)1 << 20)
#define SERVE_NODE 1u
#define CLIENT_NODE 0u
#define OWNER 0u
#define STEP 1u
#define SEED 4242u

static const char *k_secret = "cutlink-secret-0123456789abcdef!";

typedef struct cfg {
    const char *role, *dir, *bind, *job;
    uint64_t mib, mark_mib;
    int deadline_ms, wait_cut_ms, max_s;
} cfg_t;

static void die(const char *what)
{
    fprintf(stderr, "cutlink_node: %s\n", what);
    fflush(stderr);
    exit(2);
}

static void path_of(char *out, size_t cap, const cfg_t *c, const char *name)
{
    snprintf(out, cap, "%s/%s", c->dir, name);
}

static bool file_exists(const cfg_t *c, const char *name)
{
    char p[4096];
    struct stat st;
    path_of(p, sizeof p, c, name);
    return stat(p, &st) == 0;
}

static void touch(const cfg_t *c, const char *name)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    FILE *f = fopen(p, "w");
    if (!f)
        die("cannot create a marker file");
    fclose(f);
}

static void write_addr(const cfg_t *c, const char *name, const void *addr, size_t len)
{
    char tmp[4096], p[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", c->dir, name);
    path_of(p, sizeof p, c, name);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(addr, 1, len, f) != len || fclose(f) != 0)
        die("cannot write the address file");
    if (rename(tmp, p) != 0)
        die("cannot rename the address file");
}

/* Waits (at most 30 s) for the peer's address file. */
static size_t read_addr(const cfg_t *c, const char *name, uint8_t *addr, size_t cap)
{
    char p[4096];
    path_of(p, sizeof p, c, name);
    ftc_deadline_t until = ftc_deadline_in_ms(30000);
    while (!ftc_deadline_expired(until)) {
        FILE *f = fopen(p, "rb");
        if (f) {
            size_t n = fread(addr, 1, cap, f);
            fclose(f);
            if (n > 0)
                return n;
        }
        ftc_sleep_ms(10);
    }
    die("the peer's address file did not appear within 30 s");
    return 0;
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

/* A sealed shard of one uint8 tensor of `mib` MiB, the same in every process. */
static uint8_t *make_shard(uint64_t mib, uint64_t *size)
{
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "cutlink");
    in.step = STEP;
    in.generation = 1;
    in.dp = 2, in.tp = 1, in.pp = 1;
    in.dp_rank = OWNER;
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    if (!l)
        die("out of memory");
    ftc_err_t err = {0};
    uint64_t shape[1] = {mib * MiB};
    if (ftc_shard_layout_add_tensor(l, "payload", FTC_DTYPE_U8, 1, shape, &err) < 0)
        die(err.msg);
    *size = ftc_shard_layout_size(l);
    uint8_t *r = malloc(*size);
    if (!r)
        die("out of memory");
    if (ftc_shard_layout_write(l, r, *size, &err) < 0)
        die(err.msg);
    fill(ftc_shard_payload_ptr(l, r, 0), mib * MiB, SEED);
    if (ftc_shard_seal(r, *size, 1, &err) < 0)
        die(err.msg);
    ftc_shard_layout_destroy(l);
    return r;
}

typedef struct node {
    ftc_fabric_t *fab;
    ftc_repl_t *r;
} node_t;

static void node_open(node_t *n, const cfg_t *c, uint32_t self)
{
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = "tcp;ofi_rxm";
    fo.bind_addr = c->bind;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&fo, &n->fab, &err) < 0)
        die(err.msg);
    ftc_repl_options_t ro = FTC_REPL_OPTIONS_INIT;
    if (ftc_wire_key_init(&ro.key, "cutlink", k_secret, strlen(k_secret), &err) < 0)
        die(err.msg);
    ro.fab = n->fab;
    ro.job = c->job;
    ro.self = self;
    ro.generation = 1;
    ro.serve_timeout_ms = 20000;
    n->r = ftc_repl_create(&ro, &err);
    if (!n->r)
        die(err.msg);
    uint8_t me[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof me;
    if (ftc_fabric_getname(n->fab, me, &len) < 0)
        die("fi_getname failed");
    write_addr(c, self == SERVE_NODE ? "serve.addr" : "client.addr", me, len);
    uint8_t peer[FTC_FABRIC_ADDR_MAX];
    size_t plen = read_addr(c, self == SERVE_NODE ? "client.addr" : "serve.addr", peer,
                            sizeof peer);
    uint32_t other = self == SERVE_NODE ? CLIENT_NODE : SERVE_NODE;
    if (ftc_repl_peer_add(n->r, other, peer, plen) < 0)
        die(ftc_repl_errstr(n->r));
}

/* Destroys the engine (it cancels what is still posted, which may break the
 * endpoint); returns the endpoint's health afterwards. */
static int node_destroy(node_t *n)
{
    ftc_repl_destroy(n->r);
    n->r = NULL;
    return ftc_fabric_health(n->fab);
}

/* Closes the endpoint; returns how long that took (ms). */
static double node_close(node_t *n)
{
    uint64_t t0 = ftc_now_ns();
    ftc_fabric_close(n->fab);
    return (double)(ftc_now_ns() - t0) / 1e6;
}

static void unlink_slots(const cfg_t *c)
{
    for (uint32_t node = 0; node < 2; node++)
        for (int k = 0; k < 2; k++) {
            char name[FTC_SLOT_NAME_MAX];
            snprintf(name, sizeof name, "ftc.%s.n%u.p%u.s%d", c->job, node, OWNER, k);
            ftc_slot_unlink(name, NULL);
        }
}

/* ---- serve -------------------------------------------------------------------- */

static int do_serve(const cfg_t *c)
{
    node_t n;
    node_open(&n, c, SERVE_NODE);
    ftc_deadline_t until = ftc_deadline_in_ms((uint64_t)c->max_s * 1000);
    uint64_t last_check = 0;
    for (;;) {
        uint64_t now = ftc_now_ns();
        if (now - last_check > 20 * 1000000ull) {
            last_check = now;
            if (file_exists(c, "stop"))
                break;
        }
        if (ftc_deadline_expired(until)) {
            fprintf(stderr, "cutlink_node serve: not told to stop within %d s\n", c->max_s);
            break;
        }
        if (ftc_repl_progress(n.r, ftc_deadline_in_ms(20), false) < 0)
            ftc_sleep_ms(20); /* broken endpoint: wait for the stop file */
    }
    uint64_t step = 0, size = 0;
    const uint8_t *h = NULL;
    int held = ftc_repl_held(n.r, OWNER, &step, &h, &size) == 0;
    int match = -1;
    if (held) {
        uint64_t want_size = 0;
        uint8_t *want = make_shard(c->mib, &want_size);
        match = size == want_size && memcmp(h, want, size) == 0;
        free(want);
    }
    ftc_repl_counters_t ctr;
    ftc_repl_counters(n.r, &ctr);
    int health = node_destroy(&n);
    unlink_slots(c);
    printf("CUTLINK op=serve held=%d step=%llu match=%d received_mib=%llu health=%s\n", held,
           (unsigned long long)step, match, (unsigned long long)(ctr.bytes_received / MiB),
           health ? ftc_errname(health) : "ok");
    fflush(stdout);
    double close_ms = node_close(&n);
    printf("CUTLINK_CLOSED op=serve close_ms=%.0f\n", close_ms);
    fflush(stdout);
    return 0;
}

/* ---- push / fetch ---------------------------------------------------------------- */

static uint64_t moved(node_t *n, bool fetch)
{
    ftc_repl_counters_t ctr;
    ftc_repl_counters(n->r, &ctr);
    return fetch ? ctr.bytes_received : ctr.bytes_sent;
}

/* Runs transfer x to its end, pausing once it has moved mark bytes past
 * base until the script says the link is cut. Returns 0, or 3 on a hang. */
static int drive(node_t *n, const cfg_t *c, ftc_repl_xfer_t x, bool fetch, uint64_t base,
                 bool pause, ftc_repl_status_t *st, uint64_t *t_cut)
{
    uint64_t t_start = ftc_now_ns();
    ftc_deadline_t backstop = ftc_deadline_in_ms((uint64_t)c->deadline_ms + 60000);
    bool marked = !pause;
    for (;;) {
        if (ftc_repl_status(n->r, x, st) < 0)
            die("status of the transfer failed");
        if (st->done)
            return 0;
        if (ftc_deadline_expired(backstop)) {
            printf("CUTLINK op=%s rc=HANG ms=-1 detail=\"still running %d ms after its "
                   "deadline\"\n", fetch ? "fetch" : "push", 60000);
            fflush(stdout);
            return 3;
        }
        (void)ftc_repl_progress(n->r, ftc_deadline_in_ms(2), false);
        if (!marked && moved(n, fetch) - base >= c->mark_mib * MiB) {
            marked = true;
            touch(c, "started");
            printf("# %s: %llu MiB moved after %.0f ms; pausing until the link is cut\n",
                   fetch ? "fetch" : "push", (unsigned long long)((moved(n, fetch) - base) / MiB),
                   (double)(ftc_now_ns() - t_start) / 1e6);
            ftc_deadline_t w = ftc_deadline_in_ms((uint64_t)c->wait_cut_ms);
            while (!file_exists(c, "cut") && !ftc_deadline_expired(w))
                ftc_sleep_ms(5);
            if (!file_exists(c, "cut"))
                die("the script did not cut the link in time");
            *t_cut = ftc_now_ns();
        }
    }
}

static int do_client(const cfg_t *c, bool fetch)
{
    uint64_t size = 0;
    uint8_t *shard = make_shard(c->mib, &size);
    node_t n;
    node_open(&n, c, CLIENT_NODE);
    uint32_t peer = SERVE_NODE;
    ftc_repl_xfer_t x;
    ftc_repl_status_t st;
    uint64_t t_cut = 0;
    if (fetch) { /* the server must hold the shard first: push it over the intact link */
        if (ftc_repl_push(n.r, OWNER, STEP, shard, size, &peer, 1, ftc_deadline_in_ms(60000),
                          &x) < 0)
            die(ftc_repl_errstr(n.r));
        int h = drive(&n, c, x, false, 0, false, &st, &t_cut);
        if (h)
            _exit(h);
        if (st.rc != 0 || st.acked != 1) {
            fprintf(stderr, "cutlink_node fetch: the initial push failed: %s (%s)\n",
                    ftc_errname(st.rc), st.detail);
            _exit(2);
        }
        ftc_repl_release(n.r, x);
        printf("# fetch: %llu MiB pushed and acknowledged over the intact link\n",
               (unsigned long long)(size / MiB));
        fflush(stdout);
    }
    uint64_t base = moved(&n, fetch);
    uint64_t t0 = ftc_now_ns();
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->deadline_ms);
    int rc = fetch ? ftc_repl_fetch(n.r, peer, OWNER, UINT64_MAX, d, &x)
                   : ftc_repl_push(n.r, OWNER, STEP, shard, size, &peer, 1, d, &x);
    if (rc < 0)
        die(ftc_repl_errstr(n.r));
    int h = drive(&n, c, x, fetch, base, true, &st, &t_cut);
    if (h)
        _exit(h); /* a hang: leave without touching the fabric again */
    uint64_t t1 = ftc_now_ns();
    int match = -1;
    if (st.rc == 0) {
        if (fetch) {
            uint8_t *got = NULL;
            uint64_t gsize = 0;
            match = ftc_repl_take(n.r, x, &got, &gsize) == 0 && gsize == size &&
                    memcmp(got, shard, size) == 0;
            free(got);
        } else {
            match = st.acked == 1; /* the receiver ACKs only a verified replica */
        }
    }
    uint64_t mv = moved(&n, fetch) - base;
    ftc_repl_release(n.r, x);
    int health = node_destroy(&n);
    /* the outcome first: closing a broken endpoint is a separate step (see
     * docs/fabric.md, "Cut links": libfabric 1.17 may crash there) */
    printf("CUTLINK op=%s rc=%s ms=%.0f after_cut_ms=%.0f deadline_ms=%d moved_mib=%llu "
           "match=%d health=%s detail=\"%s\"\n",
           fetch ? "fetch" : "push", st.rc ? ftc_errname(st.rc) : "0", (double)(t1 - t0) / 1e6,
           t_cut ? (double)(t1 - t_cut) / 1e6 : -1.0, c->deadline_ms,
           (unsigned long long)(mv / MiB), match, health ? ftc_errname(health) : "ok",
           st.detail);
    fflush(stdout);
    double close_ms = node_close(&n);
    free(shard); /* after close: a broken endpoint may hold it until then */
    printf("CUTLINK_CLOSED op=%s close_ms=%.0f\n", fetch ? "fetch" : "push", close_ms);
    fflush(stdout);
    return 0;
}

static long num_arg(const char *s)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < 0)
        die("bad number in the arguments");
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: cutlink_node serve|push|fetch DIR BIND [--job NAME] [--mib N] "
                        "[--deadline-ms N] [--mark-mib N] [--wait-cut-ms N] [--max-s N]\n");
        return 2;
    }
    cfg_t c = {argv[1], argv[2], argv[3], "cutlink", 256, 16, 5000, 30000, 170};
    for (int i = 4; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--job"))
            c.job = v;
        else if (!strcmp(k, "--mib"))
            c.mib = (uint64_t)num_arg(v);
        else if (!strcmp(k, "--deadline-ms"))
            c.deadline_ms = (int)num_arg(v);
        else if (!strcmp(k, "--mark-mib"))
            c.mark_mib = (uint64_t)num_arg(v);
        else if (!strcmp(k, "--wait-cut-ms"))
            c.wait_cut_ms = (int)num_arg(v);
        else if (!strcmp(k, "--max-s"))
            c.max_s = (int)num_arg(v);
        else
            die("unknown option");
    }
    if ((argc - 4) % 2)
        die("an option lacks its value");
    if (c.mib == 0 || c.mark_mib >= c.mib)
        die("--mark-mib must be below --mib");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(c.role, "serve"))
        return do_serve(&c);
    if (!strcmp(c.role, "push"))
        return do_client(&c, false);
    if (!strcmp(c.role, "fetch"))
        return do_client(&c, true);
    die("role must be serve, push or fetch");
    return 2;
}
