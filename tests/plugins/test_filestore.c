/*
 * test_filestore.c — FTC_CKPT_DIR (plugins/filestore.h) between real
 * processes: a real redis-server, one filestore per forked child on loopback
 * ("tcp;ofi_rxm", one case on "shm"), children killed with SIGKILL.
 *
 *   union      node 0 writes (write + close, and write-temp-then-rename), k=1;
 *              kill -9 node 0 and remove its directory and shm; a replacement
 *              restores identical bytes; files of three nodes are unioned and
 *              the newest wins on a name clash; a survivor whose holder left
 *              re-replicates; symlinks and fifos are not replicated
 *   corrupt    k=2; a byte flipped in one holder's replica slot: the other
 *              holder is used; flipped in both: an error naming the node and
 *              the holders tried, and no file written
 *   deadpeer   a directory over the cap is refused (FTC_ERANGE); a push to a
 *              SIGKILLed peer ends at its deadline; a replacement peer gets the
 *              next push (the endpoint was rebuilt if it broke)
 *   capwrap    sparse files whose sizes add up past 2^64 are over the cap (the
 *              sum wrapped under it, and the pack overran its slot)
 *   shm        write-temp-then-rename, kill, restore on the shm provider; the
 *              survivor's endpoint breaks (its send to the killed node cannot
 *              be cancelled) and is abandoned, yet once it stops normally no
 *              /dev/shm/<pid>:* region of it remains (every node's stop checks)
 *   selfslot   a version that was never acknowledged is left in an own slot
 *              (its peer died); a restarted supervisor packs the next version:
 *              the slot of the recorded (acknowledged) version survives, and
 *              a restore without any live holder brings that version back (I3)
 *   norecord   Redis stopped (SIGSTOP) while a version is acknowledged: the
 *              flush fails naming the record; once Redis answers the record
 *              is made before the next pack, and a restore from own memory
 *              finds the recorded version's slot intact (I3)
 *   stall      k=2, one holder hung (SIGSTOP): the version the other holder
 *              acknowledged is recorded without waiting for the hung one's
 *              push deadline; the owner is then lost and a replacement
 *              restores that version from the live holder
 *   leave      k=1, the holder hangs (SIGSTOP) during a push and leaves the
 *              members: the push to it is cancelled and the version goes to
 *              the new ring without waiting for the push deadline
 *   crash      a rank killed while it rewrites a file in place: the half-written
 *              files are not packed, a restore puts the recorded copy back and
 *              moves the new file aside, a replacement gets the recorded one
 *   crashrestore  the same, the restore coming at once (before the store's
 *              next pack): the recorded copy still replaces the half-written one
 *   limits     times above a day are refused (their sums overflowed the waits)
 *   heldopen   a file kept open for writing (never replicated as it stands) is
 *              named in a warning with how long it has been held open
 *   packdelay_env  a bad FTC_TEST_FS_PACK_DELAY_MS fails the store's create,
 *              naming it (it was atoi'd at every pack)
 *   delete     a file the binary deletes is not brought back by a restore (a
 *              deletion makes a version; deleting all makes an empty one)
 *   gone       a file node 0 deletes after a restore gave node 1 a copy (in
 *              node 1's next version) stays deleted on both at the next
 *              restore; written again (newer), it is restored again; put
 *              back as a copy that kept an older mtime (cp -p), it stays
 *   goneunrecorded  a deletion no recorded version holds (the rank was
 *              killed before a pack; the pack failed) is not applied by a
 *              restore: the deleted file comes back from the recorded version
 *   gonecap    past the cap of 4096 tombstones the oldest deletions are
 *              dropped, not the copies of the oldest mtime: a cp -p copy
 *              deleted last stays deleted
 *   gonesame   a file written again with the deleted copy's mtime to the
 *              nanosecond but other bytes survives the restore on both nodes
 *              (the tombstone names the deleted copy's size and xxh3)
 *   gonesamesize  a file a restore wrote, deleted before the node packed it
 *              (also after a pack that failed, or a second restore that found
 *              it as the first wrote it): its tombstone names its bytes,
 *              so another file of that name, mtime and size survives
 *   tmpleftover  temporaries of a store process that ended (".ftc-tmp.PID.N",
 *              ".ftc-tmp.gone.PID.N") are removed by the next scan and at a
 *              store's start; other ".ftc-tmp." names stay; none is replicated
 *   pending    a file written just before a restore is still pushed after it
 *   busy       a log appended every 20 ms (never quiet) and a file rewritten in
 *              place and held open: a version is still made (busy_max_ms), with
 *              the held file as the previous version had it and without the log
 *   quietopen  a file half-written and held open while the directory is quiet
 *              (another file finished): the version has its previous copy
 *   mmapwrite  a file rewritten through a shared mapping whose descriptor was
 *              closed, the writer halfway, another file finished: the
 *              version has its previous copy, not the torn one
 *   prevcorrupt  a byte of a file flipped in the node's own slot of the
 *              previous version, then the file held open for a pack: the
 *              corrupt copy is left out, never sealed anew and spread
 *   overflow   the store's inotify queue overflows while its process is
 *              stopped (SIGSTOP) and a subdirectory is made meanwhile (its
 *              event dropped): a file later written in it is still replicated
 *   tmplink    the names of a restore's temporaries taken by hard links to a
 *              file outside the directory: nothing is written through them
 *   restorelate  a restore held (FTC_TEST_FS_HOLD) past its deadline writes no
 *              more files: it ends before its requester stops waiting and
 *              starts the ranks, not under them
 *   dirclash   a recorded file whose name is now a directory: the restore's
 *              error names the directory and says to remove it
 *   fifoswap   a file the pack scanned is replaced by a FIFO before it is read
 *              (FTC_TEST_FS_HOLD=read:PATH): the pack is made again without
 *              it; the store's thread no longer hangs in open()
 *   verwrap    a recorded version of 2^64 - 1 for this node's index is not
 *              gone above (version + 1 wrapped to 0, "no version")
 *   records    (no Redis) the parsers of the records another node wrote take
 *              whole numbers and whole words only: "5 4096 1x h" is no
 *              record (was generation 1 with holders "x"), "1x:n" no holder
 *              (was node 1), field "0x" no owner, a node id of 65 bytes no
 *              address (was cut to 64); ftc.gone.v2 round-trips, ftc.gone
 *              of an older ftc parses; the tombstone cap keeps the newest
 *              deletions (by when each was made, not by mtime)
 *   older      a holder got a newer version that was never recorded (the
 *              record hit a foreign value of the wrong type; the owner then
 *              died): its own restore takes the recorded, older version from
 *              the replica slot before its newest
 *
 * Each child runs a tiny line protocol over a socketpair (the parent's
 * commands below); every read of an answer has a deadline. Job ids carry the
 * pid; every /dev/shm/ftc.<job>.* entry is removed at the end, and a killed
 * child's shm regions (/dev/shm/<pid>:*) before it is reaped.
 */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/fsio.h"
#include "detect/redis_fixture.h"
#include "plugins/filestore.h"
#include "plugins/filestore_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>

static const char *g_prov;
static char g_job[64];
static int g_seq;

typedef struct node {
    pid_t pid;
    int fd;
    char id[65];
    char dir[PATH_MAX]; /* its FTC_CKPT_DIR */
} node_t;

/* ---- the child ------------------------------------------------------------------- */

extern void __lsan_do_leak_check(void) __attribute__((weak));
static void child_exit(int rc)
{
    if (__lsan_do_leak_check) __lsan_do_leak_check();
    _exit(rc);
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    for (int i = 0; i < n; i++)
        if (line[i] == '\n') line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
}

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (timeout_ms >= 0 && poll(&pf, 1, timeout_ms) <= 0) return -1;
        ssize_t r = read(fd, buf + n, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (buf[n] == '\n') break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

static void make_file(const char *path, uint64_t seed, size_t len)
{
    uint8_t *b = malloc(len ? len : 1);
    ftc_test_fill(b, len, seed);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0 || (len && write(fd, b, len) != (ssize_t)len) || close(fd) != 0) {
        fprintf(stderr, "child: writing %s: %s\n", path, strerror(errno));
        child_exit(3);
    }
    free(b);
}

/* Parses "G id id ..." into members. */
static int parse_members(char *s, uint64_t *gen, char (*m)[65])
{
    char *save = NULL, *tok = strtok_r(s, " ", &save);
    *gen = strtoull(tok ? tok : "0", NULL, 10);
    int n = 0;
    while ((tok = strtok_r(NULL, " ", &save)) && n < 8)
        snprintf(m[n++], 65, "%s", tok);
    return n;
}

static pid_t crashed_rank; /* crashwrite's killed rank, not reaped yet */
static pid_t survivor;     /* the rank "survivor" started, not reaped yet */

static void child_main(int fd, uint32_t index, const char *id, int k, const ftc_redis_url_t *url)
{
    ftc_err_t err = {0};
    ftc_filestore_t *fs = ftc_filestore_create(g_job, index, id, url, k, g_prov, &err);
    if (!fs) {
        say(fd, "ready %d %s", err.code, err.msg);
        child_exit(0);
    }
    say(fd, "ready 0 %s", ftc_filestore_dir(fs));
    const char *dir = ftc_filestore_dir(fs);
    char line[1024], path[PATH_MAX], tmp[PATH_MAX];
    while (read_line(fd, line, sizeof line, -1) == 0) {
        char name[256] = "";
        unsigned long long seed = 0, len = 0;
        char(*m)[65] = calloc(8, 65);
        uint64_t gen;
        ftc_filestore_poll(fs);
        if (!strncmp(line, "members ", 8)) {
            int n = parse_members(line + 8, &gen, m);
            int rc = ftc_filestore_set_members(fs, gen, (const char(*)[65])m, n, &err);
            say(fd, "%d %s", rc, rc ? err.msg : "");
        } else if (!strncmp(line, "restore ", 8)) {
            int n = parse_members(line + 8, &gen, m);
            int rc = ftc_filestore_restore(fs, gen, (const char(*)[65])m, n, &err);
            say(fd, "%d %s", rc, rc ? err.msg : "");
        } else if (sscanf(line, "write %255s %llu %llu", name, &seed, &len) == 3) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            make_file(path, seed, len);
            say(fd, "0");
        } else if (sscanf(line, "rename %255s %llu %llu", name, &seed, &len) == 3) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
            make_file(tmp, seed, len);
            say(fd, "%d", rename(tmp, path) == 0 ? 0 : -errno);
        } else if (sscanf(line, "rankwrite %255s %llu %llu", name, &seed, &len) == 3) {
            /* a rank (a child of this supervisor) writes the file and exits 0 */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                make_file(path, seed, len);
                _exit(0);
            }
            int rc = ftc_filestore_watch_ranks(fs, &r, 1, &err);
            int st = 0;
            waitpid(r, &st, 0);
            ftc_filestore_rank_exited(fs, r, st);
            say(fd, "%d", rc);
        } else if (sscanf(line, "crashwrite %255s %llu %llu %255s", name, &seed, &len, tmp) == 4) {
            /* a rank rewrites the file in place and starts a new one, and is
             * killed halfway (SIGKILL: the kernel closes both); "reap": the
             * supervisor reaps and reports it at once, else later ("reap") */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            char path2[PATH_MAX + 8];
            snprintf(path2, sizeof path2, "%s.new", path);
            uint8_t *half = malloc(len ? len : 1);
            ftc_test_fill(half, len, seed);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                int a = open(path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
                int b = open(path2, O_WRONLY | O_TRUNC | O_CREAT, 0600);
                if (a < 0 || b < 0 || write(a, half, len / 2) != (ssize_t)(len / 2) ||
                    write(b, half, 1000) != 1000)
                    _exit(3);
                pause();
                _exit(0);
            }
            free(half);
            int rc = ftc_filestore_watch_ranks(fs, &r, 1, &err);
            struct stat s1, s2;
            for (int i = 0; i < 1000; i++) { /* both written, the files still open */
                if (stat(path, &s1) == 0 && (uint64_t)s1.st_size == len / 2 &&
                    stat(path2, &s2) == 0 && s2.st_size == 1000)
                    break;
                ftc_sleep_ms(10);
            }
            kill(r, SIGKILL);
            siginfo_t si; /* dead (its files closed) before the answer, not reaped */
            memset(&si, 0, sizeof si);
            waitid(P_PID, (id_t)r, &si, WEXITED | WNOWAIT);
            if (!strcmp(tmp, "reap")) {
                int st = 0;
                waitpid(r, &st, 0);
                ftc_filestore_rank_exited(fs, r, st);
            } else {
                crashed_rank = r;
            }
            say(fd, "%d", rc);
        } else if (sscanf(line, "survivor %255s %255s %llu %llu", name, tmp, &seed, &len) == 4) {
            /* an in-process survivor, running through a restore: arms the
             * store's hold (FTC_TEST_FS_HOLD, its path is tmp), and when the
             * store holds there "rm"s NAME or "rewrite"s it in place (seed
             * len bytes, O_TRUNC: the same inode), then lets it go on */
            const char *act = strrchr(line, ' ') + 1;
            snprintf(path, sizeof path, "%s/%s", dir, name);
            char held[PATH_MAX + 8];
            snprintf(held, sizeof held, "%s.held", tmp);
            int arm = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (arm >= 0) close(arm);
            uint8_t *buf = malloc(len ? len : 1);
            ftc_test_fill(buf, len, seed);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                struct stat st;
                int i = 0;
                for (; i < 3000 && stat(held, &st) != 0; i++)
                    ftc_sleep_ms(10);
                if (i == 3000) _exit(4); /* the store never held */
                int rc = 0;
                if (!strcmp(act, "rm")) {
                    rc = unlink(path);
                } else if (!strcmp(act, "late")) { /* holds the restore past its deadline */
                    ftc_sleep_ms(len);
                } else {
                    int a = open(path, O_WRONLY | O_TRUNC);
                    rc = a < 0 || write(a, buf, len) != (ssize_t)len || close(a) != 0;
                }
                unlink(held);
                _exit(rc ? 3 : 0);
            }
            free(buf);
            survivor = r;
            say(fd, "%d", arm >= 0 && r > 0 ? 0 : 1);
        } else if (!strcmp(line, "survwait")) {
            int st = 0;
            pid_t r = survivor > 0 ? waitpid(survivor, &st, 0) : -1;
            survivor = 0;
            say(fd, "%d", r > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1);
        } else if (!strcmp(line, "reap")) {
            int st = 0;
            pid_t r = crashed_rank > 0 ? waitpid(crashed_rank, &st, 0) : -1;
            if (r > 0)
                ftc_filestore_rank_exited(fs, r, st);
            crashed_rank = 0;
            say(fd, "%d", r > 0 ? 0 : 1);
        } else if (sscanf(line, "mkdir %255s", name) == 1) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            say(fd, "%d", mkdir(path, 0700) == 0 ? 0 : -errno);
        } else if (sscanf(line, "aged %255s %llu", name, &seed) == 2) {
            /* its mtime set back seed seconds (a copy that kept an older one: cp -p) */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            struct stat st;
            int rc = stat(path, &st) == 0 ? 0 : -errno;
            struct timespec ts[2] = {st.st_atim, st.st_mtim};
            ts[1].tv_sec -= (time_t)seed;
            if (!rc && utimensat(AT_FDCWD, path, ts, 0) != 0) rc = -errno;
            say(fd, "%d", rc);
        } else if (sscanf(line, "many %255s %llu", name, &len) == 2) {
            /* len small files NAME.0 .. NAME.<len-1> */
            for (unsigned long long i = 0; i < len; i++) {
                snprintf(path, sizeof path, "%s/%s.%llu", dir, name, i);
                make_file(path, i, 8);
            }
            say(fd, "0");
        } else if (sscanf(line, "rmmany %255s %llu", name, &len) == 2) {
            int rc = 0;
            for (unsigned long long i = 0; i < len; i++) {
                snprintf(path, sizeof path, "%s/%s.%llu", dir, name, i);
                if (unlink(path) != 0 && !rc) rc = -errno;
            }
            say(fd, "%d", rc);
        } else if (sscanf(line, "getmtime %255s", name) == 1) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            struct stat st;
            if (stat(path, &st) != 0)
                say(fd, "%d", -errno);
            else
                say(fd, "0 %lld %ld", (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
        } else if (sscanf(line, "setmtime %255s %llu %llu", name, &seed, &len) == 3) {
            /* its mtime set to SEC NSEC (touch -d, os.utime to the nanosecond) */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
                                     {.tv_sec = (time_t)seed, .tv_nsec = (long)len}};
            say(fd, "%d", utimensat(AT_FDCWD, path, ts, 0) == 0 ? 0 : -errno);
        } else if (sscanf(line, "sparse %255s %llu", name, &len) == 2) {
            /* a sparse file of len bytes (ftruncate: no page written) */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            int a = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            int rc = a < 0 || ftruncate(a, (off_t)len) != 0 ? -errno : 0;
            if (a >= 0) close(a);
            say(fd, "%d", rc);
        } else if (sscanf(line, "rm %255s", name) == 1) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            say(fd, "%d", unlink(path) == 0 ? 0 : -errno);
        } else if (sscanf(line, "special %255s", name) == 1) {
            snprintf(path, sizeof path, "%s/%s.link", dir, name);
            int rc = symlink(name, path);
            snprintf(path, sizeof path, "%s/%s.fifo", dir, name);
            rc |= mkfifo(path, 0600);
            say(fd, "%d", rc);
        } else if (sscanf(line, "check %255s %llu %llu", name, &seed, &len) == 3) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            uint8_t *got = NULL, *want = malloc(len ? len : 1);
            size_t glen = 0;
            ftc_err_t e2 = {0};
            ftc_test_fill(want, len, seed);
            if (ftc_fs_read_file(path, 1u << 30, &got, &glen, &e2) != 0)
                say(fd, "1 %s", e2.msg);
            else if (glen != len || memcmp(got, want, len))
                say(fd, "2 %s: %zu bytes, not the %llu expected bytes", path, glen, len);
            else
                say(fd, "0");
            free(got);
            free(want);
        } else if (sscanf(line, "absent %255s", name) == 1) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            struct stat st;
            say(fd, "%d", lstat(path, &st) == 0 ? 1 : 0);
        } else if (sscanf(line, "appender %255s", name) == 1) {
            /* a process that keeps a log open and appends to it every 20 ms */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                int a = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
                if (a < 0) _exit(3);
                for (int i = 0;; i++) { /* until killed */
                    char l[64];
                    int n = snprintf(l, sizeof l, "step %d\n", i);
                    if (write(a, l, (size_t)n) != n) _exit(3);
                    ftc_sleep_ms(20);
                }
            }
            struct stat st;
            for (int i = 0; i < 1000 && (stat(path, &st) != 0 || st.st_size == 0); i++)
                ftc_sleep_ms(10);
            say(fd, "%d", (int)r);
        } else if (sscanf(line, "holdwrite %255s %llu %llu", name, &seed, &len) == 3) {
            /* a process rewriting the file in place, halfway, the file kept open */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            uint8_t *half = malloc(len ? len : 1);
            ftc_test_fill(half, len, seed);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                int a = open(path, O_WRONLY | O_TRUNC | O_CREAT, 0600);
                if (a < 0 || write(a, half, len / 2) != (ssize_t)(len / 2)) _exit(3);
                pause();
                _exit(0);
            }
            free(half);
            struct stat st;
            for (int i = 0; i < 1000 && (stat(path, &st) != 0 || (uint64_t)st.st_size != len / 2);
                 i++)
                ftc_sleep_ms(10);
            say(fd, "%d", (int)r);
        } else if (sscanf(line, "mmapwrite %255s %llu %llu", name, &seed, &len) == 3) {
            /* a process rewriting the file through a shared mapping (open,
             * ftruncate, mmap, close: no descriptor left), halfway, paused */
            snprintf(path, sizeof path, "%s/%s", dir, name);
            uint8_t *half = malloc(len ? len : 1);
            ftc_test_fill(half, len, seed);
            int pfd[2];
            if (pipe(pfd) != 0) child_exit(3);
            fflush(NULL);
            pid_t r = fork();
            if (r == 0) {
                int a = open(path, O_RDWR | O_TRUNC | O_CREAT, 0600);
                if (a < 0 || ftruncate(a, (off_t)len) != 0) _exit(3);
                uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
                if (map == MAP_FAILED) _exit(3);
                close(a);
                memcpy(map, half, len / 2);
                if (write(pfd[1], "x", 1) != 1) _exit(3);
                pause();
                _exit(0);
            }
            free(half);
            close(pfd[1]);
            char x;
            struct pollfd pf = {pfd[0], POLLIN, 0};
            int ok = poll(&pf, 1, 10000) == 1 && read(pfd[0], &x, 1) == 1;
            close(pfd[0]);
            say(fd, "%d", ok ? (int)r : -1);
        } else if (sscanf(line, "limits %llu %llu", &seed, &len) == 2) {
            ftc_filestore_limits_t l = FTC_FILESTORE_LIMITS_INIT;
            int busy_ms = -1, quiet_ms = -1, restore_ms = 30000;
            int got = sscanf(line, "limits %*u %*u %d %d %d", &busy_ms, &quiet_ms, &restore_ms);
            if (got >= 1) l.busy_max_ms = busy_ms;
            if (got >= 2) l.quiet_ms = quiet_ms;
            l.max_bytes = seed;
            l.push_timeout_ms = (int)len;
            l.restore_timeout_ms = restore_ms;
            int rc = ftc_filestore_set_limits(fs, &l, &err);
            say(fd, "%d %s", rc, rc ? err.msg : "");
        } else if (!strcmp(line, "flush")) {
            uint64_t t0 = ftc_now_ns();
            int rc = ftc_filestore_flush(fs, 90000, &err);
            say(fd, "%d %.0f ms %s", rc, (double)(ftc_now_ns() - t0) / 1e6, rc ? err.msg : "");
        } else if (!strcmp(line, "stats")) {
            ftc_filestore_stats_t st;
            ftc_filestore_stats(fs, &st);
            say(fd, "0 %llu %llu %llu %llu", (unsigned long long)st.versions_pushed,
                (unsigned long long)st.push_failures, (unsigned long long)st.files_restored,
                (unsigned long long)st.rebuilds);
        } else if (!strcmp(line, "quit")) {
            free(m);
            break;
        } else {
            say(fd, "-1 unknown command %s", line);
        }
        free(m);
    }
    ftc_filestore_destroy(fs);
    say(fd, "bye");
    child_exit(0);
}

/* ---- the parent ------------------------------------------------------------------- */

static redis_fixture_t *g_fix;
static const char *g_child_stderr; /* when set, the next spawned child's stderr goes there */

static node_t spawn(uint32_t index, const char *id, int k)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        if (g_child_stderr) { /* its log lines, for the test to read */
            int f = open(g_child_stderr, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
            if (f < 0 || dup2(f, 2) < 0) child_exit(3);
            close(f);
        }
        ftc_redis_url_t url = *ftc_redis_server_url(g_fix->srv);
        child_main(sv[1], index, id, k, &url);
    }
    close(sv[1]);
    node_t n = {.pid = pid, .fd = sv[0]};
    snprintf(n.id, sizeof n.id, "%s", id);
    char line[2048];
    if (read_line(n.fd, line, sizeof line, 60000) != 0) fail_msg("node %s did not start", id);
    if (strncmp(line, "ready 0", 7)) {
        if (strstr(line, "ready -17")) { /* FTC_EUNSUPPORTED: the provider is absent */
            printf("# SKIPPED: %s\n", line);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            skip();
        }
        fail_msg("node %s: %s", id, line);
    }
    printf("# node %s (index %u, pid %d): %s\n", id, index, (int)pid, line + 8);
    snprintf(n.dir, sizeof n.dir, "%s", line + 8);
    return n;
}

/* Sends a command; returns the answer's leading number, the rest in out. */
static int cmd(node_t *n, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int cmd(node_t *n, char *out, size_t cap, const char *fmt, ...)
{
    char line[1024], ans[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    assert_int_equal(write(n->fd, line, strlen(line)), (ssize_t)strlen(line));
    if (read_line(n->fd, ans, sizeof ans, 150000) != 0)
        fail_msg("node %s: no answer to '%s' (dead or hung)", n->id, line);
    char *end;
    long v = strtol(ans, &end, 10);
    if (out) snprintf(out, cap, "%s", *end ? end + 1 : "");
    return (int)v;
}

#define OK(n, ...)                                                                                 \
    do {                                                                                           \
        char msg_[2048];                                                                           \
        int rc_ = cmd((n), msg_, sizeof msg_, __VA_ARGS__);                                        \
        if (rc_ != 0) fail_msg("node %s: '%s' -> %d %s", (n)->id, #__VA_ARGS__, rc_, msg_);        \
    } while (0)

/* The same command to two nodes, a first, then b: each must answer 0. */
#define OK_BOTH(a, b, ...)                                                                         \
    do {                                                                                           \
        OK((a), __VA_ARGS__);                                                                      \
        OK((b), __VA_ARGS__);                                                                      \
    } while (0)

/* Removes the regions libfabric's shm provider named after process `pid`
 * ("/dev/shm/<pid>:<n>:<m>") and returns how many there were, naming each.
 * Call it while `pid` is a zombie of ours (waitid WNOWAIT): its number cannot
 * belong to another process yet, whose regions we would count or delete. */
static int shm_regions_rm(pid_t pid)
{
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "%d:", (int)pid), n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, (size_t)pl)) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
            printf("# removing shm region %s of process %d\n", p, (int)pid);
            unlink(p);
            n++;
        }
    closedir(d);
    return n;
}

/* Waits until child `pid` has exited, without reaping it. */
static void wait_zombie(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
}

/* A killed node cannot remove its shm regions: the test, its supervisor, does. */
static void kill9(node_t *n)
{
    kill(n->pid, SIGKILL);
    wait_zombie(n->pid);
    shm_regions_rm(n->pid);
    waitpid(n->pid, NULL, 0);
    close(n->fd);
    n->pid = -1;
}

/* A node that stops normally leaves no shm region behind, not even one of an
 * endpoint that broke and was abandoned. */
static void quit(node_t *n)
{
    if (n->pid <= 0) return;
    char line[64];
    assert_int_equal(write(n->fd, "quit\n", 5), 5);
    if (read_line(n->fd, line, sizeof line, 60000) != 0) fail_msg("node %s did not stop", n->id);
    wait_zombie(n->pid);
    int left = shm_regions_rm(n->pid);
    int st = 0;
    waitpid(n->pid, &st, 0);
    close(n->fd);
    n->pid = -1;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (left)
        fail_msg("node %s exited normally and left %d shm region(s) in /dev/shm", n->id, left);
}

/* Nodes 0 and 1 (k=1), both told the members "n0 n1" of generation 1. */
static void spawn_pair(node_t *n0, node_t *n1)
{
    *n0 = spawn(0, "n0", 1);
    *n1 = spawn(1, "n1", 1);
    OK(n0, "members 1 n0 n1");
    OK(n1, "members 1 n0 n1");
}

/* spawn_pair over tcp;ofi_rxm (g_prov: the nodes a test spawns later use it too). */
static void spawn_tcp_pair(node_t *n0, node_t *n1)
{
    g_prov = "tcp;ofi_rxm";
    spawn_pair(n0, n1);
}

/* spawn_pair, with `name`=`value` in the environment of node `index` only (a
 * store reads its FTC_TEST_FS_* hooks once, when it is created). */
static void spawn_pair_env(node_t *n0, node_t *n1, uint32_t index, const char *name,
                           const char *value)
{
    if (index == 0) assert_int_equal(setenv(name, value, 1), 0);
    *n0 = spawn(0, "n0", 1);
    unsetenv(name);
    if (index == 1) assert_int_equal(setenv(name, value, 1), 0);
    *n1 = spawn(1, "n1", 1);
    unsetenv(name);
    OK(n0, "members 1 n0 n1");
    OK(n1, "members 1 n0 n1");
}

/* Nodes 0, 1 and 2 (k copies), all told the members "n0 n1 n2" of generation 1. */
static void spawn_three(node_t *n0, node_t *n1, node_t *n2, int k)
{
    *n0 = spawn(0, "n0", k);
    *n1 = spawn(1, "n1", k);
    *n2 = spawn(2, "n2", k);
    node_t *all[] = {n0, n1, n2};
    for (int i = 0; i < 3; i++)
        OK(all[i], "members 1 n0 n1 n2");
}

/* The mtime of file `name` in node n's directory, to the nanosecond. */
static void get_mtime(node_t *n, const char *name, long long *sec, long long *nsec)
{
    char msg[2048];
    assert_int_equal(cmd(n, msg, sizeof msg, "getmtime %s", name), 0);
    assert_int_equal(sscanf(msg, "%lld %lld", sec, nsec), 2);
}

/* Removes /dev/shm entries of the job whose name starts with ftc.<job>.<what>. */
static void shm_clean(const char *what)
{
    char prefix[160];
    int pl = snprintf(prefix, sizeof prefix, "ftc.%s.%s", g_job, what);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, (size_t)pl)) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
            ftc_test_rmrf(p);
        }
    closedir(d);
}

/* What a lost node leaves behind on a new host: nothing. */
static void forget_node(uint32_t index)
{
    char what[64];
    snprintf(what, sizeof what, "ckptdir.n%u", index);
    shm_clean(what);
    snprintf(what, sizeof what, "files.n%u.", index);
    shm_clean(what);
}

/* Node `index` is lost: its process killed, its directory and shm gone. */
static void lose(node_t *n, uint32_t index)
{
    kill9(n);
    forget_node(index);
}

/* Node `index` is lost while processes of its rank still write its files
 * (writer2 <= 0: one writer): the node is killed first, so that the
 * writers' deaths make no version. */
static void lose_while_writing(node_t *n, uint32_t index, int writer, int writer2)
{
    kill9(n);
    if (writer > 0) kill(writer, SIGKILL);
    if (writer2 > 0) kill(writer2, SIGKILL);
    forget_node(index);
}

/* Node 0 is lost, and a replacement of the same id (k=1) takes its place. */
static node_t replace_node0(node_t *n0)
{
    lose(n0, 0);
    return spawn(0, "n0", 1);
}

/* Flips the first byte of file 0 in every replica slot node `holder` has of
 * owner `owner`; returns how many slots were changed. */
static int corrupt_replica(uint32_t holder, uint32_t owner)
{
    int n = 0;
    for (int s = 0; s < 2; s++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "/dev/shm/ftc.%s.files.n%u.p%u.s%d", g_job, holder, owner, s);
        uint8_t *buf = NULL;
        size_t len = 0;
        ftc_err_t e = {0};
        if (ftc_fs_read_file(path, 1u << 30, &buf, &len, &e) != 0) continue;
        ftc_shard_view_t v;
        if (ftc_shard_open(&v, buf, len, FTC_SHARD_ALLOW_TRAILING, &e) == 0 && v.n_tensors > 0) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&v, 0, &t);
            uint8_t b = (uint8_t)(t.data[0] ^ 0x5a);
            int fd = open(path, O_WRONLY);
            assert_true(fd >= 0);
            assert_int_equal(pwrite(fd, &b, 1, (off_t)t.offset), 1);
            close(fd);
            n++;
        }
        free(buf);
    }
    return n;
}

static int setup(void **state)
{
    redis_fixture_setup(state);
    g_fix = *state;
    snprintf(g_job, sizeof g_job, "fst%d-%d", (int)getpid(), ++g_seq);
    return 0;
}

static int teardown(void **state)
{
    shm_clean("");
    return redis_fixture_teardown(state);
}

/* ---- the cases ---------------------------------------------------------------------- */

static void test_union(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1, n2;
    spawn_three(&n0, &n1, &n2, 1);
    OK(&n0, "write a.bin 1 300000");
    OK(&n0, "mkdir sub");
    OK(&n0, "rename sub/b.bin 2 5243880"); /* > one 4 MiB chunk */
    OK(&n0, "special a.bin");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# node 0 flush: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n1, "write n1.bin 3 1000");
    OK(&n1, "write shared.bin 4 777");
    OK(&n1, "flush");
    ftc_sleep_ms(20);
    OK(&n2, "write shared.bin 5 888"); /* later: wins */
    OK(&n2, "write empty.bin 6 0");
    OK(&n2, "flush");

    lose(&n0, 0);
    /* the survivors move on; node 2's holder (node 0) left: it re-replicates */
    OK(&n1, "members 2 n0b n1 n2");
    OK(&n2, "members 2 n0b n1 n2");
    OK(&n2, "flush");
    node_t r0 = spawn(0, "n0b", 1);
    uint64_t t0 = ftc_now_ns();
    rc = cmd(&r0, msg, sizeof msg, "restore 2 n0b n1 n2");
    printf("# replacement restore: %d in %.0f ms %s\n", rc, (double)(ftc_now_ns() - t0) / 1e6, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 1 300000");
    OK(&r0, "check sub/b.bin 2 5243880");
    OK(&r0, "check n1.bin 3 1000");
    OK(&r0, "check shared.bin 5 888");
    OK(&r0, "check empty.bin 6 0");
    OK(&r0, "absent a.bin.link");
    OK(&r0, "absent a.bin.fifo");
    /* a survivor restores the union too: its older shared.bin is replaced */
    OK(&n1, "restore 2 n0b n1 n2");
    OK(&n1, "check shared.bin 5 888");
    OK(&n1, "check a.bin 1 300000");
    OK(&n1, "check n1.bin 3 1000");
    /* the replacement replicates its own writes */
    OK(&r0, "write c.bin 7 4096");
    OK(&r0, "flush");
    quit(&r0);
    quit(&n1);
    quit(&n2);
}

static void test_corrupt(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1, n2;
    spawn_three(&n0, &n1, &n2, 2);
    OK(&n0, "write a.bin 11 200000");
    OK(&n0, "flush");
    lose(&n0, 0);
    assert_true(corrupt_replica(1, 0) >= 1);
    OK(&n1, "members 2 r0 n1 n2");
    OK(&n2, "members 2 r0 n1 n2");
    node_t r0 = spawn(0, "r0", 2);
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 r0 n1 n2");
    printf("# restore with one corrupt holder: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 11 200000");

    /* now every copy is corrupt */
    lose(&r0, 0);
    assert_true(corrupt_replica(2, 0) >= 1);
    OK(&n1, "members 3 r1 n1 n2");
    OK(&n2, "members 3 r1 n1 n2");
    node_t r1 = spawn(0, "r1", 2);
    rc = cmd(&r1, msg, sizeof msg, "restore 3 r1 n1 n2");
    printf("# restore with every holder corrupt: %d %s\n", rc, msg);
    assert_true(rc < 0);
    assert_non_null(strstr(msg, "node 0"));
    assert_non_null(strstr(msg, "node 1"));
    assert_non_null(strstr(msg, "node 2"));
    OK(&r1, "absent a.bin");
    quit(&r1);
    quit(&n1);
    quit(&n2);
}

static void test_deadpeer(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1048576 3000");
    OK(&n0, "write big.bin 1 2000000");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# over the cap: %d %s\n", rc, msg);
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(msg, "cap"));
    OK(&n0, "rm big.bin");
    OK(&n0, "write small.bin 2 1000");
    OK(&n0, "flush");
    kill9(&n1);
    OK(&n0, "write s2.bin 3 1000");
    rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# push to a SIGKILLed peer: %d %s\n", rc, msg);
    assert_true(rc < 0);
    node_t r1 = spawn(1, "n1b", 1);
    OK(&r1, "members 2 n0 n1b");
    OK(&n0, "members 2 n0 n1b"); /* the version that missed its peer goes again */
    rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# push to the replacement: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    cmd(&n0, msg, sizeof msg, "stats");
    printf("# node 0 stats (pushed failures restored rebuilds): %s\n", msg);
    quit(&n0);
    quit(&r1);
}

/* The cap counts every byte: sparse files whose sizes add up past 2^64
 * (four of 2^62 - 64 bytes and one of 300) wrapped the sum to 44 bytes,
 * under any cap, and the pack laid the files out in a slot of that wrapped
 * size and read 2^62 bytes into it. */
static void test_capwrap(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "limits 1048576 3000");
    for (int i = 0; i < 4; i++)
        OK(&n0, "sparse big%d.bin %llu", i, (1ull << 62) - 64);
    OK(&n0, "write small.bin 1 300");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# sizes adding up past 2^64: %d %s\n", rc, msg);
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(msg, "over the cap"));
    for (int i = 0; i < 4; i++)
        OK(&n0, "rm big%d.bin", i);
    OK(&n0, "flush"); /* the store is still whole */
    quit(&n0);
    quit(&n1);
}

static void test_shm(void **state)
{
    (void)state;
    g_prov = "shm";
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "rename model.pt 21 1500000");
    OK(&n0, "flush");
    lose(&n0, 0);
    OK(&n1, "members 2 r0 n1");
    node_t r0 = spawn(0, "r0", 1);
    OK(&r0, "restore 2 r0 n1");
    OK(&r0, "check model.pt 21 1500000");
    quit(&r0);
    quit(&n1);
}

static void test_selfslot(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 3000");
    OK(&n0, "write a.bin 31 100000");
    OK(&n0, "flush"); /* version 1: acknowledged by node 1, recorded */
    kill9(&n1);
    OK(&n0, "write a.bin 32 100000");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush"); /* version 2: never acknowledged */
    printf("# push to a SIGKILLed peer: %d %s\n", rc, msg);
    assert_true(rc < 0);
    quit(&n0); /* the supervisor restarts on the same host: its slots stay */
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "limits 1073741824 3000");
    OK(&r0, "members 2 n0 n1");
    OK(&r0, "write b.bin 33 1000");
    rc = cmd(&r0, msg, sizeof msg, "flush"); /* version 3, packed over a slot, not acknowledged */
    printf("# restarted node, push to the dead peer: %d %s\n", rc, msg);
    assert_true(rc < 0);
    /* the binary lost its files; its only holder is gone: version 1 comes
     * from this node's own memory */
    OK(&r0, "rm a.bin");
    OK(&r0, "rm b.bin");
    rc = cmd(&r0, msg, sizeof msg, "restore 3 n0");
    printf("# restore from own memory: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 31 100000");
    OK(&r0, "absent b.bin");
    quit(&r0);
}

static void test_norecord(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 3000");
    OK(&n0, "write a.bin 41 100000");
    OK(&n0, "flush"); /* version 1: acknowledged and recorded */
    assert_int_equal(ftc_redis_server_signal(g_fix->srv, SIGSTOP), 0);
    OK(&n0, "write a.bin 42 100000");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush"); /* acknowledged, but Redis does not answer */
    printf("# acknowledged, Redis stopped: %d %s\n", rc, msg);
    int rc2 = cmd(&n0, NULL, 0, "stats");
    kill9(&n1); /* nothing is acknowledged from now on */
    assert_int_equal(ftc_redis_server_signal(g_fix->srv, SIGCONT), 0);
    assert_int_equal(rc2, 0);
    assert_true(rc < 0);
    assert_non_null(strstr(msg, "not recorded"));
    OK(&n0, "write b.bin 43 1000");
    rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# push to the dead peer: %d %s\n", rc, msg);
    assert_true(rc < 0);
    /* the binary lost its files: the recorded version (the one acknowledged
     * while Redis was stopped, recorded before b.bin was packed) comes from
     * own memory */
    OK(&n0, "rm a.bin");
    OK(&n0, "rm b.bin");
    rc = cmd(&n0, msg, sizeof msg, "restore 2 n0");
    printf("# restore from own memory: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n0, "check a.bin 42 100000");
    OK(&n0, "absent b.bin");
    quit(&n0);
}

/* Polls node n's stats until versions_pushed >= want (up to ~30 s). */
static bool wait_pushed(node_t *n, unsigned long long want)
{
    char msg[2048];
    for (int i = 0; i < 300; i++) {
        unsigned long long pushed = 0;
        cmd(n, msg, sizeof msg, "stats");
        if (sscanf(msg, "%llu", &pushed) == 1 && pushed >= want) return true;
        ftc_sleep_ms(100);
    }
    return false;
}

static void test_stall(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1, n2;
    spawn_three(&n0, &n1, &n2, 2);
    OK(&n0, "limits 1073741824 120000"); /* a push deadline longer than this test */
    OK(&n0, "write a.bin 51 100000");
    OK(&n0, "flush");
    kill(n2.pid, SIGSTOP); /* hung: its connection stays up, it never answers */
    OK(&n0, "write a.bin 52 100000");
    bool counted = wait_pushed(&n0, 2);
    printf("# version acknowledged by node 1 counted while node 2 hangs: %s\n",
           counted ? "yes" : "no");
    kill9(&n2);
    assert_true(counted);
    lose(&n0, 0);
    OK(&n1, "members 2 r0 n1");
    node_t r0 = spawn(0, "r0", 2);
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 r0 n1");
    printf("# replacement restore: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 52 100000");
    quit(&r0);
    quit(&n1);
}

static void test_leave(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1, n2;
    spawn_three(&n0, &n1, &n2, 1);
    OK(&n0, "limits 1073741824 120000"); /* a push deadline longer than this test */
    OK(&n0, "write a.bin 61 100000");
    OK(&n0, "flush"); /* to node 1, the next in the ring */
    kill(n1.pid, SIGSTOP);
    OK(&n0, "write a.bin 62 100000");
    ftc_sleep_ms(500); /* the push to the hung node 1 is under way */
    /* the supervisors drop node 1 from the members */
    OK(&n0, "members 2 n0 n2");
    OK(&n2, "members 2 n0 n2");
    bool counted = wait_pushed(&n0, 2);
    printf("# version pushed to the new ring while node 1 hangs: %s\n", counted ? "yes" : "no");
    kill9(&n1);
    assert_true(counted);
    lose(&n0, 0);
    OK(&n2, "members 3 r0 n2");
    node_t r0 = spawn(0, "r0", 1);
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 3 r0 n2");
    printf("# replacement restore: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 62 100000");
    quit(&r0);
    quit(&n2);
}

/* Runs a Redis command (NULL-terminated words) on the fixture; 0 or the error. */
static int redis_do(const char *a0, ...)
{
    const char *argv[8] = {a0};
    int n = 1;
    va_list ap;
    va_start(ap, a0);
    while (n < 7 && (argv[n] = va_arg(ap, const char *)))
        n++;
    va_end(ap);
    ftc_ctl_t *c = redis_fixture_ctl(g_fix, g_job);
    int rc = ftc_redis_cmd(ftc_ctl_redis(c), true, NULL, n, argv, NULL);
    ftc_ctl_destroy(c);
    return rc;
}

static void test_older(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char key[160], bak[160];
    snprintf(key, sizeof key, "ftc:{%s}:files", g_job);
    snprintf(bak, sizeof bak, "ftc:{%s}:files.bak", g_job);
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write a.bin 71 100000");
    OK(&n0, "flush"); /* version 1, held by node 1, recorded */
    assert_int_equal(redis_do("RENAME", key, bak, NULL), 0);
    assert_int_equal(redis_do("SET", key, "not a hash", NULL), 0);
    OK(&n0, "write a.bin 72 100000");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush"); /* version 2 reaches node 1, no record */
    printf("# record over a foreign value: %d %s\n", rc, msg);
    assert_true(rc < 0);
    assert_non_null(strstr(msg, "not recorded"));
    lose(&n0, 0);
    assert_int_equal(redis_do("RENAME", bak, key, NULL), 0);
    rc = cmd(&n1, msg, sizeof msg, "restore 2 n1");
    printf("# holder's restore of the recorded version: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n1, "check a.bin 71 100000");
    /* and a replacement fetches that version from the holder */
    OK(&n1, "members 3 r0 n1");
    node_t r0 = spawn(0, "r0", 1);
    rc = cmd(&r0, msg, sizeof msg, "restore 3 r0 n1");
    printf("# replacement's restore of the recorded version: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 71 100000");
    quit(&r0);
    quit(&n1);
}

/* A rank killed while it rewrites a file in place (and writes a new one):
 * the kernel closes both, half-written. The store does not pack them (the
 * flush says why), the recorded version stays the newest, a restore puts the
 * recorded copy back over the newer local file and moves the new file aside;
 * the next rank's files are packed again. Once with the dead rank not reaped
 * yet when the store looks (waitid WNOWAIT), once reaped and reported first. */
static void test_crash(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "rankwrite a.bin 51 100000");
    OK(&n0, "flush"); /* version 1, recorded */
    char msg[2048];
    unsigned long long pushed = 0;
    for (int round = 0; round < 2; round++) {
        bool reap = round == 1;
        OK(&n0, "crashwrite a.bin %d 100000 %s", 52 + 2 * round, reap ? "reap" : "noreap");
        int rc = cmd(&n0, msg, sizeof msg, "flush");
        printf("# a rank killed mid-write (%s): flush %d %s\n", reap ? "reported" : "unreaped",
               rc, msg);
        assert_true(rc != 0);
        assert_non_null(strstr(msg, "killed by signal 9"));
        assert_non_null(strstr(msg, "not packed"));
        assert_int_equal(cmd(&n0, msg, sizeof msg, "stats"), 0);
        assert_int_equal(sscanf(msg, "%llu", &pushed), 1);
        assert_int_equal(pushed, (unsigned long long)(1 + round)); /* nothing new recorded */
        if (!reap)
            OK(&n0, "reap");
        OK(&n0, "restore %d n0 n1", 2 + round);
        OK(&n0, "check a.bin %d 100000", 51 + 2 * round); /* the recorded copy, whole */
        OK(&n0, "absent a.bin.new");
        assert_int_equal(cmd(&n0, NULL, 0, "absent .ftc-tmp.crashed.a.bin.new"), 1);
        OK(&n0, "rm .ftc-tmp.crashed.a.bin.new");
        /* the next rank's files count again */
        OK(&n0, "rankwrite a.bin %d 100000", 53 + 2 * round);
        OK(&n0, "flush");
    }
    /* the half-written bytes never left the node: a replacement of node 0
     * gets the last recorded version from node 1 */
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 4 n0 n1");
    OK(&r0, "check a.bin 55 100000");
    quit(&r0);
    quit(&n1);
}

/* A file the binary deletes (a trainer keeping its last N checkpoints) is a
 * change: the next version no longer holds it, and a restore does not bring
 * it back; deleting every file makes an empty version. */
/* The supervisor restarts its ranks at once after one died: the restore
 * comes before the store tried to pack the dead rank's writes (within
 * quiet_ms), so the store had not marked the directory suspect yet, kept the
 * half-written file as "newer than every recorded copy", and packed it once
 * the new ranks ran. The restore itself now looks at the ranks' deaths. */
static void test_crashrestore(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 60000 30000");
    OK(&n0, "rankwrite a.bin 61 100000");
    OK(&n0, "flush"); /* version 1, recorded */
    OK(&n0, "crashwrite a.bin 62 100000 reap"); /* killed mid-write, reported */
    OK(&n0, "restore 2 n0 n1");                 /* at once, as ftc run does */
    OK(&n0, "check a.bin 61 100000");           /* the recorded copy, whole */
    OK(&n0, "absent a.bin.new");
    OK(&n0, "rankwrite b.bin 63 1000"); /* the next rank's files count again */
    OK(&n0, "flush");
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 3 n0 n1");
    OK(&r0, "check a.bin 61 100000"); /* the half-written bytes never left the node */
    OK(&r0, "check b.bin 63 1000");
    quit(&r0);
    quit(&n1);
}

/* The supervisor itself dies (SIGKILL, the OOM killer) while its rank
 * rewrites a file in place; the rank dies with it (PR_SET_PDEATHSIG). The
 * supervisor restarted on the same host finds the half-written file in the
 * directory, newer than every recorded copy: it kept it, and packed it as
 * its next version. The store now marks its directory while it runs
 * (.ftc-tmp.open, removed when it ends with nothing unpacked from a rank
 * that died): a successor that finds the mark treats the directory as after
 * a rank's death. */
static void test_supcrash(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 60000 30000");
    OK(&n0, "rankwrite a.bin 71 100000");
    OK(&n0, "flush"); /* version 1, recorded */
    OK(&n0, "crashwrite a.bin 72 100000 noreap"); /* killed mid-write ... */
    kill9(&n0);                                   /* ... with its supervisor */
    node_t r0 = spawn(0, "n0", 1);                /* restarted: the directory stays */
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 n0 n1");
    printf("# restore by the restarted supervisor: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 71 100000"); /* the recorded copy, whole */
    OK(&r0, "absent a.bin.new");
    OK(&r0, "rankwrite b.bin 73 1000"); /* the next rank's files count again */
    OK(&r0, "flush");
    quit(&r0); /* a clean end: the next supervisor trusts the directory */
    r0 = spawn(0, "n0", 1);
    OK(&r0, "rankwrite c.bin 74 1000");
    OK(&r0, "restore 3 n0 n1");
    OK(&r0, "check c.bin 74 1000"); /* not in any version, newer: kept */
    OK(&r0, "check b.bin 73 1000");
    r0 = replace_node0(&r0);
    OK(&r0, "restore 4 n0 n1");
    OK(&r0, "check a.bin 71 100000"); /* the half-written bytes never left the node */
    OK(&r0, "check b.bin 73 1000");
    quit(&r0);
    quit(&n1);
}

/* A file the binary opens for writing after the pack looked for writers
 * (/proc/PID/fd) but before it read the file: it was read half-written (its
 * size and mtime did not move while it was read: the writer paused) and
 * packed as if whole, the previous copy replaced on the peers. The store
 * now looks for writers again once it read the files. */
static void test_openedmidpack(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    /* node 0's store pauses 3 s between looking for writers and reading
     * (read once, when it is created) */
    node_t n0, n1;
    spawn_pair_env(&n0, &n1, 0, "FTC_TEST_FS_PACK_DELAY_MS", "3000");
    OK(&n0, "write a.bin 81 100000");
    OK(&n0, "flush"); /* version 1 */
    OK(&n0, "write b.bin 82 1000"); /* a change: packed once quiet (200 ms) ... */
    ftc_sleep_ms(1000);             /* ... and the pack is in its pause now */
    int hold = cmd(&n0, NULL, 0, "holdwrite a.bin 83 100000");
    assert_true(hold > 0);
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# flush with a.bin opened mid-pack: %d %s\n", rc, msg);
    lose_while_writing(&n0, 0, hold, 0); /* node 0 lost while a.bin is being written */
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 81 100000"); /* the previous copy, not the half-written one */
    OK(&r0, "check b.bin 82 1000");
    quit(&r0);
    quit(&n1);
}

/* A rank killed mid-write of a new file whose name is long (over 238
 * bytes): moving it aside as ".ftc-tmp.crashed.NAME" passed NAME_MAX, the
 * rename failed with a mere warning, and the half-written file stayed under
 * its own name for the binary to load, the restore reporting success. Such
 * a name is now cut (and made unique); a file that still cannot be moved
 * aside fails the restore, naming it. */
static void test_crashlongname(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    char name[252];
    memset(name, 'x', 250);
    memcpy(name + 246, ".bin", 5); /* 250 bytes; its ".new" 254 */
    OK(&n0, "rankwrite %s 111 10000", name);
    OK(&n0, "flush"); /* version 1, recorded */
    OK(&n0, "crashwrite %s 112 10000 reap", name);
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "restore 2 n0 n1");
    printf("# restore after a crash, a long name: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n0, "check %s 111 10000", name); /* the recorded copy, whole */
    OK(&n0, "absent %s.new", name);      /* the half-written new file moved aside */
    quit(&n0);
    quit(&n1);
}

/* Limits whose sum overflowed the int of a flush's or a restore's wait
 * (push_timeout_ms + quiet_ms + 10 s; restore_timeout_ms + 15 s) were
 * accepted: a flush then waited with a negative, i.e. no, deadline. Times
 * above a day are refused by name, a day is taken. */
/* A file some process keeps open for writing is never packed as it stands
 * (each version carries its previous copy, or leaves it out): a process
 * that never closes it kept it out of every version with no more than one
 * warning per version made. The store now warns that the file has been
 * held open, naming it and for how long, after busy_max_ms and then each
 * time that time doubles, also when nothing else changes. */
static void test_heldopen(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char logp[PATH_MAX];
    snprintf(logp, sizeof logp, "%s/%s.n0.log", getenv("FTC_TEST_TMP") ? getenv("FTC_TEST_TMP")
                                                                         : "/tmp", g_job);
    g_child_stderr = logp;
    node_t n0 = spawn(0, "n0", 1);
    g_child_stderr = NULL;
    node_t n1 = spawn(1, "n1", 1);
    OK_BOTH(&n0, &n1, "members 1 n0 n1");
    OK(&n0, "limits 1073741824 60000 1000"); /* busy_max_ms 1 s: the first warning's wait */
    OK(&n0, "write a.bin 161 1000");
    OK(&n0, "flush");
    int hold = cmd(&n0, NULL, 0, "holdwrite new.bin 162 20000"); /* half written, kept open */
    assert_true(hold > 0);
    bool warned = false;
    for (int i = 0; i < 300 && !warned; i++) { /* each command shows the store's log lines */
        OK(&n0, "stats");
        uint8_t *log = NULL;
        size_t len = 0;
        ftc_err_t e = {0};
        if (ftc_fs_read_file(logp, 1u << 24, &log, &len, &e) == 0) {
            char *t = realloc(log, len + 1);
            assert_non_null(t);
            t[len] = 0;
            warned = strstr(t, "new.bin has been held open for writing for about") != NULL &&
                     strstr(t, "keep files that stay open, logs, outside /dev/shm/") != NULL;
            free(t);
        } else {
            free(log);
        }
        if (!warned) ftc_sleep_ms(100);
    }
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    printf("# warned that new.bin is held open: %s\n", warned ? "yes" : "no");
    quit(&n0);
    quit(&n1);
    if (warned) unlink(logp); /* else kept, for a look */
    assert_true(warned);
}

/* FTC_TEST_FS_PACK_DELAY_MS was read with getenv + atoi at every pack:
 * "3x" was 3 ms, "x" or "-5" no delay, silently. It is read once when the
 * store is created, strictly; a bad value fails the create, naming it. */
static void test_packdelay_env(void **state)
{
    (void)state;
    const char *bad[] = {"3x", "x", "-5", "10001", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(setenv("FTC_TEST_FS_PACK_DELAY_MS", bad[i], 1), 0);
        ftc_err_t err = {0};
        const ftc_redis_url_t *url = ftc_redis_server_url(g_fix->srv);
        ftc_filestore_t *fs = ftc_filestore_create(g_job, 0, "n0", url, 1, "tcp;ofi_rxm", &err);
        unsetenv("FTC_TEST_FS_PACK_DELAY_MS");
        printf("# FTC_TEST_FS_PACK_DELAY_MS='%s': %s\n", bad[i], fs ? "accepted" : err.msg);
        ftc_filestore_destroy(fs);
        assert_null(fs);
        assert_int_equal(err.code, FTC_EINVAL);
        assert_non_null(strstr(err.msg, "FTC_TEST_FS_PACK_DELAY_MS"));
    }
}

static void test_limits(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0 = spawn(0, "n0", 1);
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "limits 1073741824 2147483647");
    printf("# push_timeout_ms INT_MAX: %d %s\n", rc, msg);
    assert_int_equal(rc, FTC_EINVAL);
    assert_non_null(strstr(msg, "deadlines in 1..86400000 ms"));
    assert_int_equal(cmd(&n0, msg, sizeof msg, "limits 1073741824 60000 86400001"), FTC_EINVAL);
    OK(&n0, "limits 1073741824 86400000 86400000");
    quit(&n0);
}

static void test_delete(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write ckpt_1.bin 61 50000");
    OK(&n0, "write ckpt_2.bin 62 50000");
    OK(&n0, "flush");
    OK(&n0, "rm ckpt_1.bin");
    OK(&n0, "flush");
    assert_true(wait_pushed(&n0, 2));
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check ckpt_2.bin 62 50000");
    OK(&r0, "absent ckpt_1.bin");
    OK(&r0, "rm ckpt_2.bin"); /* nothing left: an empty version */
    OK(&r0, "flush");
    node_t r1 = replace_node0(&r0);
    OK(&r1, "restore 3 n0 n1");
    OK(&r1, "absent ckpt_2.bin");
    quit(&r1);
    quit(&n1);
}

/* Deletions are recorded (tombstones): after a restore every node holds the
 * union, so node 1's next version holds node 0's files; a file node 0 then
 * deletes must not come back from node 1's version (a binary keeping its
 * last N checkpoints would pile up every deleted one on every node). */
static void test_gone(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write a.bin 81 40000");
    OK(&n0, "write b.bin 82 40000");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK(&n1, "check a.bin 81 40000");
    OK(&n0, "rm a.bin");
    OK(&n0, "flush");
    OK(&n1, "write c.bin 83 1000"); /* node 1's next version, still holding a.bin */
    OK(&n1, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent a.bin");
    OK_BOTH(&n0, &n1, "check b.bin 82 40000");
    OK(&n0, "check c.bin 83 1000");
    /* the binary writes it again: the newer copy wins over the deletion */
    OK(&n0, "write a.bin 84 2000");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "check a.bin 84 2000");
    /* a rollback: b.bin deleted (packed), then put back as a copy that kept an
     * older mtime (cp -p): it stays, on both nodes; it was removed everywhere
     * (a copy no newer than the tombstone counted as the deleted one) */
    OK(&n0, "rm b.bin");
    OK(&n0, "flush");
    OK(&n0, "write b.bin 85 3000");
    OK(&n0, "aged b.bin 3600");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "check b.bin 85 3000");
    quit(&n0);
    quit(&n1);
}

/* Only the tombstones of recorded versions are applied by a restore: a
 * deletion no recorded version holds is undone, the deleted file coming back
 * from the last recorded version. Once a rank deletes its old checkpoint and
 * is killed writing the next before any pack (quiet_ms 30 s), once the pack
 * that holds the deletion fails (its only peer died). */
static void test_goneunrecorded(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 3000");
    OK(&n0, "write a.bin 121 40000");
    OK(&n0, "write b.bin 122 40000");
    OK(&n0, "flush"); /* version 1, recorded, holding both */
    OK(&n0, "limits 1073741824 3000 60000 30000"); /* no pack for 30 s of quiet */
    OK(&n0, "rm a.bin");
    OK(&n0, "crashwrite c.bin 123 40000 reap");
    OK(&n0, "restore 2 n0 n1");
    OK(&n0, "check a.bin 121 40000"); /* the unrecorded deletion is not applied */
    OK(&n0, "check b.bin 122 40000");
    OK(&n0, "absent c.bin"); /* half-written, moved aside */
    OK(&n0, "rm .ftc-tmp.crashed.c.bin");
    OK(&n0, "rm .ftc-tmp.crashed.c.bin.new");
    OK(&n0, "limits 1073741824 3000"); /* quiet_ms back to its default */
    OK(&n0, "rankwrite d.bin 124 1000"); /* the next rank's files count again */
    OK(&n0, "flush");                    /* version 2, recorded */
    kill9(&n1);
    OK(&n0, "rm a.bin");
    char msg[2048];
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# the deletion's pack, its peer dead: %d %s\n", rc, msg);
    assert_true(rc < 0);
    assert_null(strstr(msg, "killed")); /* it failed for its push, not for the crash */
    rc = cmd(&n0, msg, sizeof msg, "restore 3 n0");
    printf("# restore from own memory: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n0, "check a.bin 121 40000"); /* the failed pack's tombstone is not applied */
    OK(&n0, "check b.bin 122 40000");
    OK(&n0, "check d.bin 124 1000");
    quit(&n0);
}

/* The cap on tombstones (4096) dropped the oldest by the deleted copy's
 * mtime: a copy that kept an old mtime (cp -p), deleted after 4096 others,
 * lost its tombstone first although it was the newest deletion, and came
 * back from another node's version. The cap now drops the oldest deletions. */
static void test_gonecap(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "many f 4096");
    OK(&n0, "write x.bin 141 3000");
    OK(&n0, "aged x.bin 3600"); /* put back by cp -p: an hour old */
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1"); /* node 1 gets a copy of x.bin ... */
    OK(&n1, "write c.bin 142 1000");
    OK(&n1, "flush"); /* ... and its next version holds it */
    OK(&n0, "rmmany f 4096");
    OK(&n0, "flush"); /* 4096 tombstones */
    OK(&n0, "rm x.bin");
    OK(&n0, "flush"); /* one more, the newest deletion, of the oldest mtime */
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent x.bin");
    OK(&n0, "check c.bin 142 1000");
    quit(&n0);
    quit(&n1);
}

/* A file written again with exactly the deleted copy's mtime (touch -d to
 * the same time, os.utime to the nanosecond) but other bytes lost to the
 * tombstone: the restore took it for the deleted copy, left it out of the
 * union and removed it from the directory. A tombstone now names the
 * deleted copy's size and xxh3 (from the node's own version): a copy of
 * that mtime with other bytes is another file. */
static void test_gonesame(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write x.bin 151 5000");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1"); /* node 1 has a copy */
    long long sec = 0, nsec = 0;
    get_mtime(&n0, "x.bin", &sec, &nsec);
    OK(&n0, "rm x.bin");
    OK(&n0, "flush"); /* the tombstone */
    OK(&n1, "restore 1 n0 n1"); /* node 1 applies it and carries it ... */
    OK(&n1, "absent x.bin");
    OK(&n1, "write c.bin 152 1000");
    OK(&n1, "flush"); /* ... in its next version */
    /* other bytes, the same size, the deleted copy's mtime */
    OK(&n0, "write x.bin 153 5000");
    OK(&n0, "setmtime x.bin %lld %lld", sec, nsec);
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "check x.bin 153 5000");
    OK(&n0, "check c.bin 152 1000");
    /* and deleted again: it stays deleted on both */
    OK(&n0, "rm x.bin");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent x.bin");
    quit(&n0);
    quit(&n1);
}

/* Node 1 deletes a file it has but whose bytes no version of its own
 * holds and that is no longer as a restore wrote it, so no xxh3 is known
 * (here: a restore's copy whose ctime moved, a pack that failed over the
 * cap between). Node 0 then has another x.bin of exactly that mtime and
 * another size (touch -d, os.utime to the nanosecond, a copy from another
 * writer): the tombstone took the mtime alone, left it out of the union
 * and removed it from node 0's directory. Such a tombstone now names the
 * deleted copy's size, which must match too. */
static void gone_unknown(node_t *n1, const char *name, long long sec, long long nsec,
                         unsigned seed)
{
    char msg[2048];
    OK(n1, "limits 100 60000");
    OK(n1, "setmtime %s %lld %lld", name, sec, nsec); /* the same mtime: the ctime moves */
    OK(n1, "write z.bin %u 10", seed);
    assert_int_not_equal(cmd(n1, msg, sizeof msg, "flush"), 0); /* over the cap */
    OK(n1, "rm %s", name);
    OK(n1, "limits 1073741824 60000");
    OK(n1, "flush"); /* the tombstone: the size alone */
}

static void test_gonenohash(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write x.bin 181 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1"); /* node 1's copy, from node 0's version */
    long long sec = 0, nsec = 0;
    get_mtime(&n0, "x.bin", &sec, &nsec);
    gone_unknown(&n1, "x.bin", sec, nsec, 185);
    OK(&n0, "write x.bin 183 7000");
    OK(&n0, "setmtime x.bin %lld %lld", sec, nsec);
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "check x.bin 183 7000");
    /* the deleted copy itself stays deleted: its size matches */
    OK(&n0, "write y.bin 184 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1");
    get_mtime(&n0, "y.bin", &sec, &nsec);
    gone_unknown(&n1, "y.bin", sec, nsec, 186);
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent y.bin");
    quit(&n0);
    quit(&n1);
}

/* A tombstone of a copy that a restore wrote (from another node's version)
 * and that the binary deleted before this node packed it named the
 * deleted copy's size alone: another file of that name, mtime and size but
 * other bytes was taken for the deleted copy, left out of the union and
 * removed on every node. The restore knows that copy's xxh3 (its version's
 * checksum) and keeps it while the file stays as written (its ctime), also
 * across a pack that failed: such a tombstone names the bytes. */
static void test_gonesamesize(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    char msg[2048];
    long long xs = 0, xn = 0, ws = 0, wn = 0;
    OK(&n0, "write x.bin 221 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1"); /* node 1's copy, written by the restore */
    get_mtime(&n0, "x.bin", &xs, &xn);
    OK(&n1, "rm x.bin");
    OK(&n1, "flush"); /* node 1's first version: the tombstone */
    /* the same through a pack that failed (over the cap) before the deletion */
    OK(&n0, "write w.bin 222 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1");
    get_mtime(&n0, "w.bin", &ws, &wn);
    OK(&n1, "limits 100 60000");
    OK(&n1, "write z.bin 223 10");
    assert_int_not_equal(cmd(&n1, msg, sizeof msg, "flush"), 0);
    OK(&n1, "rm w.bin");
    OK(&n1, "limits 1073741824 60000");
    OK(&n1, "flush");
    /* the same after a second restore that found the copy as the first wrote
     * it (not written again: the xxh3 stays known while its ctime stays) */
    long long vs = 0, vn = 0;
    OK(&n0, "write v.bin 227 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1");
    OK(&n1, "restore 1 n0 n1");
    get_mtime(&n0, "v.bin", &vs, &vn);
    OK(&n1, "rm v.bin");
    OK(&n1, "flush");
    /* node 0: other bytes, the same size, each deleted copy's mtime */
    OK(&n0, "write x.bin 224 5000");
    OK(&n0, "setmtime x.bin %lld %lld", xs, xn);
    OK(&n0, "write w.bin 225 5000");
    OK(&n0, "setmtime w.bin %lld %lld", ws, wn);
    OK(&n0, "write v.bin 228 5000");
    OK(&n0, "setmtime v.bin %lld %lld", vs, vn);
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "check x.bin 224 5000");
    OK_BOTH(&n0, &n1, "check w.bin 225 5000");
    OK_BOTH(&n0, &n1, "check v.bin 228 5000");
    OK(&n1, "check z.bin 223 10");
    /* the deleted copy itself stays deleted */
    OK(&n0, "write y.bin 226 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1");
    OK(&n1, "rm y.bin");
    OK(&n1, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent y.bin");
    quit(&n0);
    quit(&n1);
}

/* A pid no process has (a child that ran and was reaped). */
static pid_t dead_pid(void)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) _exit(0);
    assert_true(p > 0);
    assert_int_equal(waitpid(p, NULL, 0), p);
    return p;
}

/* A store process killed between making a temporary and renaming or
 * removing it (a restore's write ".ftc-tmp.PID.N", a deleted copy moved
 * aside ".ftc-tmp.gone.PID.N") left it for good: nothing removed it. A scan
 * now removes those of ended processes, and so does a store at its start;
 * a live process's, other ".ftc-tmp." names and non-files stay; none is
 * ever replicated. */
static void test_tmpleftover(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    int dead = (int)dead_pid(), live = (int)getpid();
    OK(&n0, "write a.bin 201 1000");
    OK(&n0, "flush");
    char gone_top[64], tmp_top[64], gone_sub[80], keep_live[64], keep_zero[64], keep_dir[64];
    snprintf(gone_top, sizeof gone_top, ".ftc-tmp.gone.%d.0", dead);
    snprintf(tmp_top, sizeof tmp_top, ".ftc-tmp.%d.7", dead);
    snprintf(gone_sub, sizeof gone_sub, "sub/.ftc-tmp.gone.%d.1", dead);
    snprintf(keep_live, sizeof keep_live, ".ftc-tmp.gone.%d.0", live);
    snprintf(keep_zero, sizeof keep_zero, ".ftc-tmp.0%d.0", dead);
    snprintf(keep_dir, sizeof keep_dir, ".ftc-tmp.%d.9", dead);
    OK(&n0, "write %s 202 100", gone_top);
    OK(&n0, "write %s 203 100", tmp_top);
    OK(&n0, "mkdir sub");
    OK(&n0, "write %s 204 100", gone_sub);
    OK(&n0, "write %s 205 100", keep_live);
    OK(&n0, "write %s 206 100", keep_zero);
    OK(&n0, "mkdir %s", keep_dir);
    OK(&n0, "write .ftc-tmp.notes 207 100");
    OK(&n0, "write .ftc-tmp.crashed.c.bin 208 100");
    OK(&n0, "write b.bin 209 1000");
    OK(&n0, "flush"); /* a pack: its scan */
    OK(&n0, "absent %s", gone_top);
    OK(&n0, "absent %s", tmp_top);
    OK(&n0, "absent %s", gone_sub);
    OK(&n0, "check %s 205 100", keep_live);
    OK(&n0, "check %s 206 100", keep_zero);
    OK(&n0, "check .ftc-tmp.notes 207 100");
    OK(&n0, "check .ftc-tmp.crashed.c.bin 208 100");
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", n0.dir, keep_dir);
    assert_true(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    /* never replicated */
    OK(&n1, "restore 1 n0 n1");
    OK(&n1, "check a.bin 201 1000");
    OK(&n1, "check b.bin 209 1000");
    OK(&n1, "absent %s", keep_live);
    OK(&n1, "absent %s", keep_zero);
    OK(&n1, "absent .ftc-tmp.notes");
    OK(&n1, "absent .ftc-tmp.crashed.c.bin");
    /* at start: a restarted supervisor's store finds one its predecessor left */
    quit(&n0);
    snprintf(path, sizeof path, "%s/sub/.ftc-tmp.%d.3", n0.dir, dead);
    make_file(path, 210, 100);
    assert_int_equal(stat(path, &st), 0);
    n0 = spawn(0, "n0", 1);
    assert_int_equal(stat(path, &st), -1);
    OK(&n0, "check %s 205 100", keep_live);
    quit(&n0);
    quit(&n1);
}

/* By design (docs/recovery.md): a file written again with exactly the
 * deleted copy's mtime, size and bytes is the deleted copy to every node:
 * where another node's version carries the tombstone, a restore leaves it
 * out and removes it, on the node that wrote it again too. */
static void test_gonesamebytes(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write x.bin 191 5000");
    OK(&n0, "flush");
    OK(&n1, "restore 1 n0 n1");
    long long sec = 0, nsec = 0;
    get_mtime(&n0, "x.bin", &sec, &nsec);
    OK(&n0, "rm x.bin");
    OK(&n0, "flush"); /* the tombstone */
    OK(&n1, "restore 1 n0 n1"); /* node 1 applies it and carries it ... */
    OK(&n1, "absent x.bin");
    OK(&n1, "write c.bin 192 1000");
    OK(&n1, "flush"); /* ... in its next version */
    OK(&n0, "write x.bin 191 5000"); /* the same bytes, the same mtime */
    OK(&n0, "setmtime x.bin %lld %lld", sec, nsec);
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK_BOTH(&n0, &n1, "absent x.bin");
    OK(&n0, "check c.bin 192 1000");
    quit(&n0);
    quit(&n1);
}

/* A surviving in-process rank rewrites a file in place while a restore
 * removes it (a tombstone from another node names its previous copy): the
 * restore had checked the copy and then unlinked the name, the rewrite
 * with it. The removal now moves the name aside and checks that it still
 * holds the inode and mtime it checked, else puts it back. */
static void test_goneraced(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char hold[PATH_MAX], env[PATH_MAX + 16];
    snprintf(hold, sizeof hold, "%s/hold.%d", P_tmpdir, (int)getpid());
    snprintf(env, sizeof env, "remove:%s", hold);
    node_t n0, n1;
    spawn_pair_env(&n0, &n1, 1, "FTC_TEST_FS_HOLD", env);
    OK(&n0, "write a.bin 161 40000");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1"); /* node 1 has a copy */
    OK(&n1, "check a.bin 161 40000");
    OK(&n0, "rm a.bin");
    OK(&n0, "flush"); /* the tombstone */
    OK(&n1, "survivor a.bin %s 162 30000 rewrite", hold);
    OK(&n1, "restore 1 n0 n1");
    OK(&n1, "survwait"); /* it rewrote the file while the restore held */
    OK(&n1, "check a.bin 162 30000");
    unlink(hold);
    quit(&n0);
    quit(&n1);
}

/* A surviving in-process rank deletes a restored file after the restore
 * wrote it and before the restore looked at the directory again: that look
 * became what the store compares the next pack with, so the deletion made
 * no tombstone (nor a pack) and the file came back at the next restore. */
static void test_gonerescan(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char hold[PATH_MAX], env[PATH_MAX + 16];
    snprintf(hold, sizeof hold, "%s/hold.%d", P_tmpdir, (int)getpid());
    snprintf(env, sizeof env, "rescan:%s", hold);
    node_t n0, n1;
    spawn_pair_env(&n0, &n1, 1, "FTC_TEST_FS_HOLD", env);
    OK(&n0, "write a.bin 171 40000");
    OK(&n0, "write b.bin 172 40000");
    OK(&n0, "flush");
    OK(&n1, "survivor b.bin %s 0 0 rm", hold);
    OK(&n1, "restore 1 n0 n1"); /* writes both; b.bin deleted before the look */
    OK(&n1, "survwait");
    OK(&n1, "check a.bin 171 40000");
    OK(&n1, "absent b.bin");
    OK(&n1, "flush"); /* the deletion's tombstone */
    OK_BOTH(&n0, &n1, "restore 1 n0 n1");
    OK(&n1, "absent b.bin");
    OK(&n0, "absent b.bin");
    OK(&n0, "check a.bin 171 40000");
    unlink(hold);
    quit(&n0);
    quit(&n1);
}

/* A file written just before a restore (not packed yet: the quiet period
 * had not passed) still makes a version after the restore; before, the
 * restore dropped every queued event, its own and the binary's. */
static void test_pending(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write a.bin 71 20000");
    OK(&n0, "flush"); /* version 1 */
    OK(&n0, "write b.bin 72 20000");
    OK(&n0, "restore 2 n0 n1"); /* at once: b.bin is not packed yet */
    assert_true(wait_pushed(&n0, 2));
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 3 n0 n1");
    OK(&r0, "check a.bin 71 20000");
    OK(&r0, "check b.bin 72 20000");
    quit(&r0);
    quit(&n1);
}

/* A directory that is never quiet (a log appended every 20 ms) still makes
 * versions, busy_max_ms after a change; a file still being written (the
 * log, a file rewritten in place and held open) goes in as the previous
 * version held it, or not at all: never half-written. Before, no version
 * was made while the log grew. */
static void test_busy(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "limits 1073741824 60000 1000"); /* busy_max_ms 1 s */
    OK(&n0, "write a.bin 91 50000");
    OK(&n0, "flush"); /* version 1 */
    int app = cmd(&n0, NULL, 0, "appender train.log");
    int hold = cmd(&n0, NULL, 0, "holdwrite a.bin 92 50000");
    assert_true(app > 0 && hold > 0);
    OK(&n0, "write b.bin 93 50000"); /* a finished file: a change */
    bool pushed = wait_pushed(&n0, 2); /* never quiet: made once busy_max_ms passed */
    lose_while_writing(&n0, 0, app, hold); /* while both files are still being written */
    assert_true(pushed);
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 91 50000"); /* the previous version's, not the half-written one */
    OK(&r0, "check b.bin 93 50000");
    OK(&r0, "absent train.log"); /* being written and in no version: left out */
    quit(&r0);
    quit(&n1);
}

/* A file held open for writing is not finished, even when the directory is
 * quiet: a rank that writes half a file and pauses (computing the rest)
 * while another file it finished makes the directory change. The quiet
 * pack used to take the half-written file as it stood, and a replacement
 * node got it back torn; now it goes in as the previous version held it. */
static void test_quietopen(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write a.bin 95 50000");
    OK(&n0, "flush"); /* version 1 */
    int hold = cmd(&n0, NULL, 0, "holdwrite a.bin 96 50000"); /* half written, then a pause */
    assert_true(hold > 0);
    OK(&n0, "write b.bin 97 50000"); /* a finished file: a change */
    bool pushed = wait_pushed(&n0, 2); /* the directory is quiet: a plain pack */
    lose_while_writing(&n0, 0, hold, 0);
    assert_true(pushed);
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 95 50000"); /* the previous version's, not the half-written one */
    OK(&r0, "check b.bin 97 50000");
    quit(&r0);
    quit(&n1);
}

/* A file rewritten through a shared mapping (open, ftruncate, mmap, close:
 * no descriptor is left for the look for writers, and the file's
 * IN_CLOSE_WRITE comes only when it is unmapped): its writer halfway, a
 * pack made for another file's change read it as it stood and replicated
 * it torn. The mapping now counts as a writer: the version has the
 * previous copy. */
static void test_mmapwrite(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write a.bin 95 50000");
    OK(&n0, "flush"); /* version 1 */
    int hold = cmd(&n0, NULL, 0, "mmapwrite a.bin 96 50000"); /* half written, mapped */
    assert_true(hold > 0);
    OK(&n0, "write b.bin 97 50000");
    OK(&n0, "flush");
    lose_while_writing(&n0, 0, hold, 0);
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 95 50000"); /* the previous version's, not the torn one */
    OK(&r0, "check b.bin 97 50000");
    quit(&r0);
    quit(&n1);
}

/* A byte of a file's data flipped in the node's own slot of its previous
 * version (a stray write, a bit flip in /dev/shm), then a pack with that
 * file held open for writing: the pack used to copy the corrupt bytes from
 * that slot and seal them under fresh checksums, so the peers took them as
 * valid and a replacement node got them back; now the copy is checked and
 * the file left out of the new version. */
static void test_prevcorrupt(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write a.bin 101 50000");
    OK(&n0, "write c.bin 103 50000");
    OK(&n0, "flush"); /* version 1, in one of node 0's own slots */
    int hit = 0;
    for (int s = 0; s < 2; s++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "/dev/shm/ftc.%s.files.n0.self.s%d", g_job, s);
        uint8_t *buf = NULL;
        size_t len = 0;
        ftc_err_t e = {0};
        if (ftc_fs_read_file(path, 1u << 30, &buf, &len, &e) != 0) continue;
        ftc_shard_view_t v;
        int t = -1;
        if (ftc_shard_open(&v, buf, len, FTC_SHARD_ALLOW_TRAILING, &e) == 0)
            t = ftc_shard_find(&v, "a.bin");
        if (t >= 0) { /* a byte in the middle of a.bin's data, found by its contents */
            uint8_t *want = malloc(50000);
            ftc_test_fill(want, 50000, 101);
            ftc_shard_tensor_t tt;
            ftc_shard_get(&v, (uint32_t)t, &tt);
            assert_int_equal(tt.length, 50000);
            assert_memory_equal(tt.data, want, 50000);
            uint8_t b = (uint8_t)(want[25000] ^ 0x5a);
            int fd = open(path, O_WRONLY);
            assert_true(fd >= 0);
            assert_int_equal(pwrite(fd, &b, 1, (off_t)(tt.offset + 25000)), 1);
            close(fd);
            free(want);
            printf("# flipped byte 25000 of a.bin in %s\n", path);
            hit++;
        }
        free(buf);
    }
    assert_int_equal(hit, 1);
    int hold = cmd(&n0, NULL, 0, "holdwrite a.bin 102 50000"); /* held open: a busy file */
    assert_true(hold > 0);
    OK(&n0, "write b.bin 104 50000"); /* a finished file: a change */
    bool pushed = wait_pushed(&n0, 2);
    lose_while_writing(&n0, 0, hold, 0);
    assert_true(pushed);
    node_t r0 = spawn(0, "n0", 1);
    OK(&r0, "restore 2 n0 n1");
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "check a.bin 101 50000");
    printf("# a.bin after the restore: %d %s\n", rc, msg);
    assert_int_not_equal(rc, 2); /* never the corrupt bytes */
    OK(&r0, "absent a.bin");     /* left out of version 2 */
    OK(&r0, "check b.bin 104 50000");
    OK(&r0, "check c.bin 103 50000");
    OK(&n1, "restore 2 n0 n1"); /* the union on the peer: no corrupt a.bin either */
    OK(&n1, "absent a.bin");
    OK(&n1, "check b.bin 104 50000");
    quit(&r0);
    quit(&n1);
}

/* A version held by many peers with long node ids: its recorded holder list
 * runs past 1000 bytes (it used to be cut there, silently). The record of
 * node 0's version lists 30 holders of 62-byte ids that are not members
 * first and its real holder, node 1, last; a replacement of node 0 finds
 * and fetches it from node 1. */
static void test_longholders(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char key[160];
    snprintf(key, sizeof key, "ftc:{%s}:files", g_job);
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write a.bin 81 100000");
    OK(&n0, "flush"); /* held by node 1, recorded "version size gen 1:n1" */
    ftc_ctl_t *c = redis_fixture_ctl(g_fix, g_job);
    ftc_redis_reply_t *rep = NULL;
    const char *s;
    size_t sl;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "HGET", key, "0", NULL), 0);
    assert_int_equal(ftc_redis_want_str(rep, key, &s, &sl, &e), 0);
    unsigned long long ver, size, gen;
    assert_int_equal(sscanf(s, "%llu %llu %llu", &ver, &size, &gen), 3);
    ftc_redis_reply_free(rep);
    char val[4096];
    int vl = snprintf(val, sizeof val, "%llu %llu %llu ", ver, size, gen);
    for (int i = 0; i < 30; i++)
        vl += snprintf(val + vl, sizeof val - (size_t)vl,
                       "%d:gone-%02d-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,",
                       100 + i, i);
    snprintf(val + vl, sizeof val - (size_t)vl, "1:n1");
    printf("# record of %zu bytes\n", strlen(val));
    assert_true(strlen(val) > 2000);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET", key, "0", val, NULL), 0);
    lose(&n0, 0);
    OK(&n1, "members 2 r0 n1");
    node_t r0 = spawn(0, "r0", 1);
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 r0 n1");
    printf("# replacement's restore: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 81 100000");
    /* a record whose holder list is longer than any push can write is refused by name */
    char *big = malloc(40000);
    assert_non_null(big);
    int bl = snprintf(big, 40000, "%llu %llu %llu ", ver, size, gen);
    while (bl < 39000)
        bl += snprintf(big + bl, 40000 - (size_t)bl, "1:n1,");
    snprintf(big + bl, 40000 - (size_t)bl, "1:n1");
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET", key, "0", big, NULL), 0);
    free(big);
    rc = cmd(&r0, msg, sizeof msg, "restore 2 r0 n1");
    printf("# restore over an oversized record: %d %s\n", rc, msg);
    assert_true(rc != 0);
    assert_non_null(strstr(msg, "lists holders in"));
    ftc_ctl_destroy(c);
    quit(&r0);
    quit(&n1);
}

/* A record of this node's index whose version is 2^64 - 1 (garbage, or
 * written by a faulty store) is not taken as the version to go above:
 * version + 1 wrapped to 0, a version the store takes for "none". */
static void test_verwrap(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char key[160];
    snprintf(key, sizeof key, "ftc:{%s}:files", g_job);
    ftc_ctl_t *c = redis_fixture_ctl(g_fix, g_job);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET", key, "0",
                                    "18446744073709551615 100 1 1:n1", NULL),
                     0);
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write a.bin 141 5000");
    OK(&n0, "flush");
    ftc_redis_reply_t *rep = NULL;
    const char *s;
    size_t sl;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "HGET", key, "0", NULL), 0);
    assert_int_equal(ftc_redis_want_str(rep, key, &s, &sl, &e), 0);
    unsigned long long ver = 0;
    assert_int_equal(sscanf(s, "%llu", &ver), 1);
    printf("# recorded after the push: %.*s\n", (int)sl, s);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
    assert_true(ver > 0 && ver < (1ull << 63));
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 141 5000");
    quit(&r0);
    quit(&n1);
}

/* The events of the flood below that one inotify queue holds. */
static long max_queued_events(void)
{
    long v = 0;
    FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = 0;
        fclose(f);
    }
    return v > 0 ? v : 16384;
}

static void test_overflow(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "write a.bin 91 1000");
    OK(&n0, "flush");
    /* a queue of our own beside the store's, with the same limit, never read
     * until the flood is over: it shows that the flood overflowed such a queue */
    int wit = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    assert_true(wit >= 0);
    assert_true(inotify_add_watch(wit, n0.dir, IN_MODIFY | IN_CREATE) >= 0);
    int st = 0;
    assert_int_equal(kill(n0.pid, SIGSTOP), 0);
    assert_int_equal(waitpid(n0.pid, &st, WUNTRACED), n0.pid);
    assert_true(WIFSTOPPED(st));
    /* more IN_MODIFY events than a queue holds (two files in turn: the kernel
     * merges only an event equal to the one queued last), then a new directory,
     * whose IN_CREATE is dropped */
    char pa[PATH_MAX + 16], pb[PATH_MAX + 16], late[PATH_MAX + 16];
    snprintf(pa, sizeof pa, "%s/flood.a", n0.dir);
    snprintf(pb, sizeof pb, "%s/flood.b", n0.dir);
    snprintf(late, sizeof late, "%s/late", n0.dir);
    int fa = open(pa, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int fb = open(pb, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fa >= 0 && fb >= 0);
    long flood = max_queued_events() + 64;
    for (long i = 0; i < flood; i++)
        assert_int_equal(write(i % 2 ? fb : fa, "x", 1), 1);
    close(fa);
    close(fb);
    assert_int_equal(unlink(pa), 0);
    assert_int_equal(unlink(pb), 0);
    assert_int_equal(mkdir(late, 0700), 0);
    _Alignas(struct inotify_event) char buf[65536];
    uint32_t last = 0;
    long nev = 0;
    for (;;) {
        ssize_t n = read(wit, buf, sizeof buf);
        if (n <= 0) break;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            p += sizeof *e + e->len;
            last = e->mask;
            nev++;
        }
    }
    close(wit);
    printf("# witness queue: %ld events, the last 0x%x\n", nev, last);
    assert_true(last & IN_Q_OVERFLOW);
    assert_int_equal(kill(n0.pid, SIGCONT), 0);
    OK(&n0, "flush"); /* the overflow is read: a version of the rescanned directory */
    OK(&n0, "write late/c.bin 92 5000");
    OK(&n0, "flush");
    lose(&n0, 0);
    OK(&n1, "members 2 r0 n1");
    node_t r0 = spawn(0, "r0", 1);
    OK(&r0, "restore 2 r0 n1");
    OK(&r0, "check a.bin 91 1000");
    OK(&r0, "check late/c.bin 92 5000");
    quit(&r0);
    quit(&n1);
}

/* A restore writes only inside the node's directory: a subdirectory that is
 * now a symbolic link (a binary linking it to a shared file system, or
 * anything else) is not written through. Before, the replacement wrote
 * sub/a.bin into the link's target, outside its directory. */
static void test_symlinked_subdir(void **state)
{
    (void)state;
    node_t n0, n1;
    spawn_tcp_pair(&n0, &n1);
    OK(&n0, "mkdir sub");
    OK(&n0, "write sub/a.bin 101 3000");
    OK(&n0, "write b.bin 102 2000");
    OK(&n0, "flush");
    node_t r0 = replace_node0(&n0);
    char outside[PATH_MAX], link[PATH_MAX + 8], moved[PATH_MAX + 16], msg[2048];
    snprintf(outside, sizeof outside, "/dev/shm/ftc.%s.outside", g_job);
    assert_int_equal(mkdir(outside, 0700), 0);
    snprintf(link, sizeof link, "%s/sub", r0.dir);
    assert_int_equal(symlink(outside, link), 0);
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 n0 n1");
    printf("# restore over a symlinked subdirectory: %d %s\n", rc, msg);
    assert_true(rc != 0);
    assert_non_null(strstr(msg, "is a symbolic link"));
    snprintf(moved, sizeof moved, "%s/a.bin", outside);
    struct stat st;
    assert_int_equal(lstat(moved, &st), -1); /* nothing written outside */
    OK(&r0, "check b.bin 102 2000");        /* the rest is restored */
    /* the link removed, the next restore puts sub/a.bin back */
    assert_int_equal(unlink(link), 0);
    OK(&r0, "restore 3 n0 n1");
    OK(&r0, "check sub/a.bin 101 3000");
    quit(&r0);
    quit(&n1);
}

/* A restore writes a temporary beside the file and renames it into place;
 * a name of that temporary already in the directory (planted by a binary:
 * a hard link to a file outside) is not written through: it truncated and
 * overwrote the file outside, and the restored file was that inode. */
static void test_tmplink(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write a.bin 111 3000");
    OK(&n0, "flush");
    node_t r0 = replace_node0(&n0);
    char outside[PATH_MAX], lnk[PATH_MAX + 32], msg[2048];
    snprintf(outside, sizeof outside, "/dev/shm/ftc.%s.outside", g_job);
    int fd = open(outside, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "keep", 4), 4);
    close(fd);
    /* the names of the restore's first temporaries: .ftc-tmp.PID.N, N from 0 */
    for (int i = 0; i < 4; i++) {
        snprintf(lnk, sizeof lnk, "%s/.ftc-tmp.%d.%d", r0.dir, (int)r0.pid, i);
        assert_int_equal(link(outside, lnk), 0);
    }
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 n0 n1");
    printf("# restore with its temporaries' names taken: %d %s\n", rc, msg);
    uint8_t *got = NULL;
    size_t glen = 0;
    ftc_err_t e = {0};
    assert_int_equal(ftc_fs_read_file(outside, 1u << 20, &got, &glen, &e), 0);
    printf("# the file outside: %zu bytes\n", glen);
    assert_true(glen == 4 && !memcmp(got, "keep", 4)); /* nothing written outside */
    free(got);
    assert_int_equal(rc, 0);
    OK(&r0, "check a.bin 111 3000");
    struct stat st;
    snprintf(lnk, sizeof lnk, "%s/a.bin", r0.dir);
    assert_int_equal(stat(lnk, &st), 0);
    assert_int_equal(st.st_nlink, 1); /* its own inode */
    quit(&r0);
    quit(&n1);
}

/* A restore's writes had no deadline: one still writing when its
 * requester stopped waiting (restore_timeout_ms + 15 s; ftc run then
 * starts the ranks) wrote under the new ranks. Now the writes end
 * min(restore_timeout_ms / 2, 10 s) after the fetches' deadline: the
 * restore, held in its removal of a deleted copy past that, writes no more
 * files and says so (FTC_ETIMEDOUT); the next restore writes them. */
static void test_restorelate(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char hold[PATH_MAX], env[PATH_MAX + 16], msg[2048];
    snprintf(hold, sizeof hold, "%s/hold.%d", P_tmpdir, (int)getpid());
    snprintf(env, sizeof env, "remove:%s", hold);
    node_t n0, n1;
    spawn_pair_env(&n0, &n1, 1, "FTC_TEST_FS_HOLD", env);
    OK(&n0, "write a.bin 181 4000");
    OK(&n0, "flush");
    OK_BOTH(&n0, &n1, "restore 1 n0 n1"); /* node 1 has a copy */
    OK(&n0, "rm a.bin");
    OK(&n0, "write c.bin 182 3000");
    OK(&n0, "flush"); /* c.bin and the tombstone of a.bin */
    OK(&n1, "limits 1073741824 60000 30000 200 300"); /* restore_timeout_ms 300 */
    OK(&n1, "survivor a.bin %s 0 700 late", hold); /* holds the removal 700 ms */
    int rc = cmd(&n1, msg, sizeof msg, "restore 1 n0 n1");
    printf("# restore held past its deadline: %d %s\n", rc, msg);
    OK(&n1, "survwait");
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(msg, "deadline passed"));
    OK(&n1, "absent c.bin"); /* not written after the deadline */
    OK(&n1, "absent a.bin"); /* the deleted copy is removed all the same */
    OK(&n1, "limits 1073741824 60000 30000 200 30000");
    OK(&n1, "restore 1 n0 n1");
    OK(&n1, "check c.bin 182 3000");
    unlink(hold);
    quit(&n0);
    quit(&n1);
}

/* A recorded file whose name the binary has since made a directory: the
 * restore fails naming the directory and saying what to do (it said
 * "rename ...: Is a directory"); the rest is restored. */
static void test_dirclash(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    node_t n0, n1;
    spawn_pair(&n0, &n1);
    OK(&n0, "write ckpt 121 2000");
    OK(&n0, "write b.bin 122 1000");
    OK(&n0, "flush");
    node_t r0 = replace_node0(&n0);
    OK(&r0, "mkdir ckpt");
    OK(&r0, "write ckpt/new.bin 123 500");
    char msg[2048];
    int rc = cmd(&r0, msg, sizeof msg, "restore 2 n0 n1");
    printf("# restore over a directory of the file's name: %d %s\n", rc, msg);
    assert_true(rc != 0);
    assert_non_null(strstr(msg, "is a directory"));
    assert_non_null(strstr(msg, "remove the directory"));
    OK(&r0, "check b.bin 122 1000");
    OK(&r0, "check ckpt/new.bin 123 500"); /* the binary's directory is kept */
    quit(&r0);
    quit(&n1);
}

/* A file the scan found regular and the binary replaced by a FIFO before
 * the pack read it: the pack's open waited for a writer that never came,
 * and the store's thread hung for good (every flush and restore timed out,
 * and its destroy never returned). Now it is a file that changed while
 * read: the pack is made again, without it. */
static void test_fifoswap(void **state)
{
    (void)state;
    g_prov = "tcp;ofi_rxm";
    char hold[PATH_MAX], held[PATH_MAX + 8], env[PATH_MAX + 16], path[PATH_MAX], msg[2048];
    snprintf(hold, sizeof hold, "%s/hold.%d", P_tmpdir, (int)getpid());
    snprintf(held, sizeof held, "%s.held", hold);
    snprintf(env, sizeof env, "read:%s", hold);
    node_t n0, n1;
    spawn_pair_env(&n0, &n1, 0, "FTC_TEST_FS_HOLD", env);
    OK(&n0, "write a.bin 131 2000");
    OK(&n0, "flush");
    int arm = open(hold, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(arm >= 0);
    close(arm);
    OK(&n0, "write b.bin 132 1000");
    struct stat st;
    int i = 0;
    for (; i < 1000 && stat(held, &st) != 0; i++) /* the pack scanned b.bin */
        ftc_sleep_ms(10);
    assert_true(i < 1000);
    snprintf(path, sizeof path, "%s/b.bin", n0.dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(unlink(held), 0); /* the pack goes on: it reads b.bin */
    int rc = cmd(&n0, msg, sizeof msg, "flush");
    printf("# b.bin made a FIFO while packed: %d %s\n", rc, msg);
    assert_int_equal(rc, 0);
    OK(&n0, "rm b.bin");
    OK(&n0, "write c.bin 133 3000");
    OK(&n0, "flush"); /* the store still works */
    node_t r0 = replace_node0(&n0);
    OK(&r0, "restore 2 n0 n1");
    OK(&r0, "check a.bin 131 2000");
    OK(&r0, "check c.bin 133 3000");
    OK(&r0, "absent b.bin");
    unlink(hold);
    quit(&r0);
    quit(&n1);
}

static void test_records(void **state)
{
    (void)state;
    uint64_t v = 0, sz = 0, g = 0;
    char *h = NULL;
    const char *rec_ok[] = {"12 4096 3 1:a,2:b", "12 4096 3 ", "12 4096 3"};
    for (size_t i = 0; i < sizeof rec_ok / sizeof *rec_ok; i++) {
        assert_int_equal(ftc__fs_rec_parse(rec_ok[i], strlen(rec_ok[i]), &v, &sz, &g, &h), 0);
        assert_true(v == 12 && sz == 4096 && g == 3 && !strcmp(h, i ? "" : "1:a,2:b"));
        free(h);
        h = NULL;
    }
    const char *rec_bad[] = {"5 4096 1x 1:a", "5 4096 -1 1:a", "5x 4096 1", "5 4096 1 1:a x",
                             "5 4096", "18446744073709551616 1 1", "+5 1 1"};
    for (size_t i = 0; i < sizeof rec_bad / sizeof *rec_bad; i++)
        if (ftc__fs_rec_parse(rec_bad[i], strlen(rec_bad[i]), &v, &sz, &g, &h) != -1)
            fail_msg("record '%s' parsed (version %" PRIu64 ", gen %" PRIu64 ")", rec_bad[i], v,
                     g);
    assert_int_equal(ftc__fs_rec_parse("1 2 3\0 x", 9, &v, &sz, &g, &h), -1);

    /* a holder list: the good entries, the bad ones skipped */
    const char *p = "1x:n1,3:n3,:n,4:,1024:big,0:n0:x,,7:n7";
    uint32_t idx[8], n = 0;
    char id[FTC_CTL_NODE_MAX + 1], ids[8][FTC_CTL_NODE_MAX + 1];
    for (int hr; (hr = ftc__fs_holder_next(&p, &idx[n], id, sizeof id)) != 0 && n < 8;)
        if (hr > 0)
            snprintf(ids[n++], sizeof ids[0], "%s", id);
    assert_int_equal(n, 3);
    assert_true(idx[0] == 3 && !strcmp(ids[0], "n3") && idx[1] == 0 && !strcmp(ids[1], "n0:x") &&
                idx[2] == 7 && !strcmp(ids[2], "n7"));

    uint32_t o = 99;
    assert_true(ftc__fs_index_parse("17", 2, &o) && o == 17);
    const char *idx_bad[] = {"0x", "1024", "-1", " 1", "", "1 "};
    for (size_t i = 0; i < sizeof idx_bad / sizeof *idx_bad; i++)
        if (ftc__fs_index_parse(idx_bad[i], strlen(idx_bad[i]), &o))
            fail_msg("node index '%s' parsed as %u", idx_bad[i], o);

    char hex[2 * FTC_FABRIC_ADDR_MAX + 1], nid[FTC_CTL_NODE_MAX + 1];
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    size_t al = 0;
    assert_true(ftc__fs_filefab_parse("0aff node-1", hex, sizeof hex, addr, &al, nid, sizeof nid));
    assert_true(al == 2 && addr[0] == 0x0a && addr[1] == 0xff && !strcmp(nid, "node-1"));
    char longid[200];
    snprintf(longid, sizeof longid, "0aff %0*d", FTC_CTL_NODE_MAX + 1, 7);
    const char *fab_bad[] = {longid, "0af n", "0aZZ n", "0aff", "0aff n extra"};
    for (size_t i = 0; i < sizeof fab_bad / sizeof *fab_bad; i++)
        if (ftc__fs_filefab_parse(fab_bad[i], hex, sizeof hex, addr, &al, nid, sizeof nid))
            fail_msg("address '%.80s' parsed (node id '%s')", fab_bad[i], nid);

    /* ftc.gone.v2: the record of a set parses back to it; a duplicate or a
     * disorder is refused */
    ftc__fs_stamps_t set = {0}, back = {0};
    ftc__fs_stamp_t e[] = {{.name = "a/b", .mtime_ns = 5, .gone_ns = 7},
                           {.name = "c",
                            .mtime_ns = 1ull << 62,
                            .gone_ns = 9,
                            .hashed = true,
                            .size = 3,
                            .xxh3 = 0xabcdef},
                           {.name = "d", .mtime_ns = 6, .gone_ns = 8, .sized = true, .size = 11}};
    set.e = e, set.n = set.cap = 3;
    size_t len = 0;
    uint8_t *rec = ftc__fs_gone_record(&set, &len);
    assert_non_null(rec);
    char why[200];
    assert_int_equal(
        ftc__fs_gone_parse(rec, (uint32_t)len, FTC__FS_GONE_V2, &back, why, sizeof why), 0);
    assert_true(back.n == 3 && !strcmp(back.e[0].name, "a/b") && back.e[0].mtime_ns == 5 &&
                back.e[0].gone_ns == 7 && !back.e[0].hashed && !strcmp(back.e[1].name, "c") &&
                back.e[1].mtime_ns == 1ull << 62 && back.e[1].gone_ns == 9 && back.e[1].hashed &&
                back.e[1].size == 3 && back.e[1].xxh3 == 0xabcdef && !back.e[1].sized);
    assert_true(back.n == 3 && !strcmp(back.e[2].name, "d") && back.e[2].sized &&
                !back.e[2].hashed && back.e[2].size == 11 && back.e[2].xxh3 == 0);
    ftc__fs_stamps_free(&back);
    /* flags: 3 (both), 4, or 2 (size alone) with an xxh3 are refused; the
     * flags of entry "d" are its record's last 4 bytes */
    const uint32_t badflags[][2] = {{3, 0}, {4, 0}, {2, 1}};
    for (size_t i = 0; i < sizeof badflags / sizeof *badflags; i++) {
        uint8_t *r2 = ftc__fs_gone_record(&set, &len);
        assert_non_null(r2);
        r2[len - 4] = (uint8_t)badflags[i][0];
        r2[len - 12] = (uint8_t)badflags[i][1]; /* the low byte of xxh3 */
        assert_int_equal(
            ftc__fs_gone_parse(r2, (uint32_t)len, FTC__FS_GONE_V2, &back, why, sizeof why),
            FTC_ECORRUPT);
        printf("# flags %u, xxh3 %u: %s\n", badflags[i][0], badflags[i][1], why);
        free(r2);
    }
    set.n = 2;
    /* the form of an older ftc: u32 length, name, u64 mtime; its deletion
     * time taken as the mtime */
    const uint8_t v1[] = {1, 0, 0, 0, 'x', 42, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(ftc__fs_gone_parse(v1, sizeof v1, FTC__FS_GONE_V1, &back, why, sizeof why),
                     0);
    assert_true(back.n == 1 && !strcmp(back.e[0].name, "x") && back.e[0].mtime_ns == 42 &&
                back.e[0].gone_ns == 42 && !back.e[0].hashed);
    ftc__fs_stamps_free(&back);
    /* a name of the store's own (.ftc-tmp.*), as a file or a directory,
     * is refused: no scan packs one */
    const char *own[] = {".ftc-tmp.7.1", "a/.ftc-tmp.open", ".ftc-tmp.x/b"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        ftc__fs_stamp_t e1 = {.name = (char *)own[i], .mtime_ns = 5, .gone_ns = 7};
        ftc__fs_stamps_t one = {.e = &e1, .n = 1, .cap = 1};
        uint8_t *r1 = ftc__fs_gone_record(&one, &len);
        assert_non_null(r1);
        assert_int_equal(
            ftc__fs_gone_parse(r1, (uint32_t)len, FTC__FS_GONE_V2, &back, why, sizeof why),
            FTC_ECORRUPT);
        printf("# %s: %s\n", own[i], why);
        free(r1);
        ftc__fs_stamps_free(&back);
    }
    e[1].name = "a/b";
    free(rec);
    rec = ftc__fs_gone_record(&set, &len);
    assert_int_equal(
        ftc__fs_gone_parse(rec, (uint32_t)len, FTC__FS_GONE_V2, &back, why, sizeof why),
        FTC_ECORRUPT);
    assert_int_equal(back.n, 0);
    free(rec);
    ftc__fs_stamps_free(&back);

    /* the cap keeps the newest deletions, by when each tombstone was made:
     * "old" is a copy that kept an old mtime (cp -p), deleted last */
    const char *names[] = {"a", "b", "d", "old"};
    uint64_t mt[] = {100, 900, 500, 50}, gn[] = {5, 1, 3, 9};
    set = (ftc__fs_stamps_t){.e = calloc(4, sizeof *set.e), .cap = 4};
    for (int i = 0; i < 4; i++)
        set.e[set.n++] =
            (ftc__fs_stamp_t){.name = strdup(names[i]), .mtime_ns = mt[i], .gone_ns = gn[i]};
    assert_int_equal(ftc__fs_gone_bound(&set, 2, 1 << 20), 2);
    assert_true(set.n == 2 && !strcmp(set.e[0].name, "a") && !strcmp(set.e[1].name, "old"));
    assert_int_equal(ftc__fs_gone_bound(&set, 2, 1 << 20), 0);
    assert_int_equal(ftc__fs_gone_bound(&set, 2, 40 + 3), 1); /* bytes: "old" alone fits */
    assert_true(set.n == 1 && !strcmp(set.e[0].name, "old"));
    ftc__fs_stamps_free(&set);

    /* the store's own temporaries that a scan may remove, and nothing else */
    int pid = 0;
    assert_true(ftc__fs_tmp_leftover(".ftc-tmp.gone.12.0", &pid) && pid == 12);
    assert_true(ftc__fs_tmp_leftover(".ftc-tmp.2147483647.4294967295", &pid) && pid == INT_MAX);
    const char *not_tmp[] = {".ftc-tmp.open", ".ftc-tmp.crashed.a.bin", ".ftc-tmp.notes",
                             ".ftc-tmp.gone.12", ".ftc-tmp.12.0.x", ".ftc-tmp.012.0",
                             ".ftc-tmp.12.00", ".ftc-tmp.0.1", ".ftc-tmp.2147483648.0",
                             ".ftc-tmp.1.4294967296", ".ftc-tmp.-1.0", ".ftc-tmp.+1.0",
                             ".ftc-tmp.gone.gone.1.0", "x.ftc-tmp.1.0", ".ftc-tmp.1.0/"};
    for (size_t i = 0; i < sizeof not_tmp / sizeof *not_tmp; i++)
        if (ftc__fs_tmp_leftover(not_tmp[i], &pid))
            fail_msg("'%s' taken for a temporary of process %d", not_tmp[i], pid);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1) /* test_plugins_filestore test_busy: that case alone */
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test_setup_teardown(test_union, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadpeer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capwrap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_selfslot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_norecord, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
        cmocka_unit_test_setup_teardown(test_older, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crashrestore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_supcrash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_openedmidpack, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crashlongname, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_packdelay_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heldopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_goneunrecorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonecap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonesame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonenohash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonesamebytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonesamesize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tmpleftover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_goneraced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gonerescan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quietopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mmapwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prevcorrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_longholders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlinked_subdir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tmplink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restorelate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dirclash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifoswap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verwrap, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
