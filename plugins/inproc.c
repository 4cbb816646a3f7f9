/*
 * inproc.c — the in-process recovery contract (assignment and state files,
 * the SIGUSR1 leave request). See inproc.h.
 */
#include "plugins/inproc.h"

#include "core/config.h"
#include "core/fsio.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to path.tmp and renames it over path. */
static int ftc__atomic_write(const char *path, const char *text, ftc_err_t *err)
{
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return ftc_err_set(err, FTC_EINVAL, "in-process file path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ftc_err_set(err, FTC_EIO, "cannot write %s: %s", tmp, strerror(errno));
    bool ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return ftc_err_set(err, FTC_EIO, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

static bool ftc__valid_var(const char *v)
{
    const char *k = v[0] == '-' ? v + 1 : v;
    size_t klen = strcspn(k, "=");
    if (klen == 0 || strchr(v, '\n'))
        return false;
    for (size_t i = 0; i < klen; i++)
        if (!(k[i] == '_' || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') ||
              (i > 0 && k[i] >= '0' && k[i] <= '9')))
            return false;
    return v[0] == '-' ? k[klen] == 0 : k[klen] == '=';
}

int ftc_inproc_assign_write(const char *path, char *const *vars, int n, ftc_err_t *err)
{
    if (!path || !*path || (n > 0 && !vars) || n < 0 || n > FTC_INPROC_MAX_VARS)
        return ftc_err_set(err, FTC_EINVAL, "in-process assignment: need a path and 0..%d "
                                            "variables", FTC_INPROC_MAX_VARS);
    size_t cap = 1;
    bool gen = false;
    for (int i = 0; i < n; i++) {
        if (!vars[i] || !ftc__valid_var(vars[i]) || strlen(vars[i]) >= FTC_INPROC_LINE_MAX)
            return ftc_err_set(err, FTC_EINVAL, "in-process assignment: '%s' is not KEY=VALUE "
                                                "or -KEY", vars[i] ? vars[i] : "(null)");
        gen = gen || !strncmp(vars[i], "FTC_GENERATION=", 15);
        cap += strlen(vars[i]) + 1;
    }
    if (!gen)
        return ftc_err_set(err, FTC_EINVAL, "in-process assignment %s: no FTC_GENERATION", path);
    char *text = malloc(cap);
    if (!text)
        return ftc_err_set(err, FTC_ENOMEM, "in-process assignment: out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(text + k, "%s\n", vars[i]);
    text[k] = 0;
    int rc = ftc__atomic_write(path, text, err);
    free(text);
    return rc;
}

int ftc_inproc_assign_parse(const char *text, size_t len, const char *what,
                            ftc_inproc_assign_t *a, ftc_err_t *err)
{
    memset(a, 0, sizeof *a);
    bool gen = false;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        const char *line = text + pos;
        pos += ll + (nl ? 1 : 0);
        if (ll >= FTC_INPROC_LINE_MAX)
            return ftc_err_set(err, FTC_EPROTO, "%s: a line longer than %d bytes", what,
                               FTC_INPROC_LINE_MAX - 1);
        if (!ll)
            continue;
        char buf[FTC_INPROC_LINE_MAX];
        memcpy(buf, line, ll);
        buf[ll] = 0;
        if (memchr(line, 0, ll) || !ftc__valid_var(buf) || a->n == FTC_INPROC_MAX_VARS)
            return ftc_err_set(err, FTC_EPROTO,
                               "%s: '%.80s' is not KEY=VALUE or -KEY (or more than %d lines)",
                               what, buf, FTC_INPROC_MAX_VARS);
        if (!strncmp(buf, "FTC_GENERATION=", 15)) {
            char *end = NULL;
            errno = 0;
            unsigned long long g = strtoull(buf + 15, &end, 10);
            if (errno || end == buf + 15 || *end || buf[15] < '0' || buf[15] > '9')
                return ftc_err_set(err, FTC_EPROTO, "%s: FTC_GENERATION '%s' is not a number",
                                   what, buf + 15);
            a->gen = g;
            gen = true;
        }
        memcpy(a->line[a->n++], buf, ll + 1);
    }
    if (!gen)
        return ftc_err_set(err, FTC_EPROTO, "%s: no FTC_GENERATION line", what);
    return 0;
}

int ftc_inproc_assign_read(const char *path, ftc_inproc_assign_t *a, ftc_err_t *err)
{
    memset(a, 0, sizeof *a);
    uint8_t *buf = NULL;
    size_t len = 0;
    ftc_err_t e2 = {0};
    int rc = ftc_fs_read_file(path, (size_t)FTC_INPROC_MAX_VARS * (FTC_INPROC_LINE_MAX + 1), &buf,
                              &len, &e2);
    if (rc == FTC_ENOENT)
        return ftc_err_set(err, FTC_ENOENT, "no in-process assignment in %s yet", path);
    if (rc)
        return ftc_err_set(err, rc == FTC_ERANGE || rc == FTC_ETRUNC ? FTC_EPROTO : FTC_EIO,
                           "cannot read %s: %s", path, e2.msg);
    rc = ftc_inproc_assign_parse((const char *)buf, len, path, a, err);
    free(buf);
    return rc;
}

int ftc_inproc_assign_wait(const char *path, uint64_t after_gen, ftc_deadline_t dl,
                           volatile sig_atomic_t *cancel, ftc_inproc_assign_t *a, ftc_err_t *err)
{
    for (;;) {
        ftc_err_t e2 = {0};
        int rc = ftc_inproc_assign_read(path, a, &e2);
        if (rc == 0 && a->gen > after_gen)
            return 0;
        if (rc && rc != FTC_ENOENT && rc != FTC_EPROTO)
            return ftc_err_set(err, rc, "%s", e2.msg);
        if (cancel && *cancel)
            return ftc_err_set(err, FTC_ECANCELED, "waiting for an in-process assignment: "
                                                   "cancelled");
        if (ftc_deadline_expired(dl))
            return ftc_err_set(err, FTC_ETIMEDOUT,
                               "no assignment newer than generation %" PRIu64 " in %s before "
                               "the deadline (FTC_ASSIGN_TIMEOUT_MS): is the supervisor (ftc run "
                               "--in-process) alive?",
                               after_gen, path);
        ftc_sleep_ms(20);
    }
}

int ftc_inproc_apply(const ftc_inproc_assign_t *a, ftc_err_t *err)
{
    for (int i = 0; i < a->n; i++) {
        char kv[FTC_INPROC_LINE_MAX];
        snprintf(kv, sizeof kv, "%s", a->line[i]);
        int rc;
        if (kv[0] == '-') {
            rc = unsetenv(kv + 1);
        } else {
            char *eq = strchr(kv, '=');
            if (!eq)
                return ftc_err_set(err, FTC_EPROTO, "assignment line '%s' has no '='", kv);
            *eq = 0;
            rc = setenv(kv, eq + 1, 1);
        }
        if (rc)
            return ftc_err_set(err, FTC_ENOMEM, "setenv %s: %s", kv, strerror(errno));
    }
    return 0;
}

void ftc_inproc_state_path(const char *assign_path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.state", assign_path);
}

int ftc_inproc_state_write(const char *state_path, const ftc_inproc_state_t *st, ftc_err_t *err)
{
    char text[512], why[256];
    snprintf(why, sizeof why, "%s", st->why);
    for (char *p = why; *p; p++)
        if (*p == '\n')
            *p = ' ';
    snprintf(text, sizeof text, "pid=%d gen=%" PRIu64 " phase=%s why=%s\n", (int)st->pid,
             st->gen, st->phase == FTC_INPROC_WAITING ? "waiting" : "running", why);
    return ftc__atomic_write(state_path, text, err);
}

int ftc_inproc_state_read(const char *state_path, ftc_inproc_state_t *st, ftc_err_t *err)
{
    memset(st, 0, sizeof *st);
    FILE *f = fopen(state_path, "r");
    if (!f)
        return errno == ENOENT ? ftc_err_set(err, FTC_ENOENT, "no state file %s", state_path)
                               : ftc_err_set(err, FTC_EIO, "cannot read %s: %s", state_path,
                                             strerror(errno));
    char line[512] = "";
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    if (!got || !ftc_inproc_state_parse(line, st))
        return ftc_err_set(err, FTC_EPROTO, "%s: '%.100s' is not 'pid=P gen=G phase=running|"
                                            "waiting why=TEXT'", state_path, line);
    return 0;
}

bool ftc_inproc_state_parse(const char *line, ftc_inproc_state_t *st)
{
    memset(st, 0, sizeof *st);
    int off = 0;
    int64_t pid = 0;
    uint64_t gen = 0;
    char pw[16] = "", gw[24] = "", phase[16] = "";
    /* whole numbers, spaces between (sscanf's %llu took "gen=-1" as 2^64-1,
     * and its " " took "pid=8gen=3phase=..." too) */
    if (sscanf(line, "pid=%15[-0-9]%*[ ]gen=%23[0-9]%*[ ]phase=%15s%*[ ]why=%n", pw, gw, phase,
               &off) < 3 ||
        off == 0 || (strcmp(phase, "running") && strcmp(phase, "waiting")) ||
        ftc_parse_int(pw, INT_MIN, INT_MAX, &pid) || ftc_parse_u64(gw, &gen))
        return false;
    st->pid = (pid_t)pid;
    st->gen = gen;
    st->phase = strcmp(phase, "waiting") ? FTC_INPROC_RUNNING : FTC_INPROC_WAITING;
    snprintf(st->why, sizeof st->why, "%s", line + off);
    st->why[strcspn(st->why, "\n")] = 0;
    return true;
}

/* ---- the leave request ------------------------------------------------------------------ */

static _Atomic uint64_t ftc__cur_gen;   /* the rank's generation */
static _Atomic uint64_t ftc__leave_gen; /* the newest generation asked to leave (+1; 0: none) */
static void (*ftc__on_leave)(void *);
static void *ftc__on_leave_arg;

static atomic_int ftc__other_usr1; /* the sender of an ignored SIGUSR1 (-1: unknown; 0: none) */

static void ftc__usr1(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    /* only a queued request (the supervisor's sigqueue, with a generation)
     * is one: a plain kill -USR1 is Slurm's warning (sbatch --signal=USR1@N
     * reaches every process of the step) or an operator's, and it made
     * every rank leave, failing the generation */
    if (!si || si->si_code != SI_QUEUE) {
        atomic_store(&ftc__other_usr1, si && si->si_pid > 0 ? (int)si->si_pid : -1);
        return;
    }
    uint64_t cur = atomic_load(&ftc__cur_gen);
    uint64_t g = (uint64_t)(unsigned)si->si_value.sival_int;
    if (g + 1 > atomic_load(&ftc__leave_gen))
        atomic_store(&ftc__leave_gen, g + 1);
    if (g >= cur && ftc__on_leave) /* (a newer one: this rank is behind, it goes too) */
        ftc__on_leave(ftc__on_leave_arg);
}

int ftc_inproc_install(void (*on_leave)(void *arg), void *arg, ftc_err_t *err)
{
    ftc__on_leave = on_leave;
    ftc__on_leave_arg = arg;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = ftc__usr1;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) < 0)
        return ftc_err_set(err, FTC_EIO, "sigaction SIGUSR1: %s", strerror(errno));
    return 0;
}

void ftc_inproc_set_generation(uint64_t gen) { atomic_store(&ftc__cur_gen, gen); }

bool ftc_inproc_leave_requested(void)
{
    return atomic_load(&ftc__leave_gen) > atomic_load(&ftc__cur_gen);
}

int ftc_inproc_ignored_signal(void) { return atomic_exchange(&ftc__other_usr1, 0); }

int ftc_inproc_signal(pid_t pid, uint64_t gen)
{
    union sigval v;
    v.sival_int = (int)(unsigned)gen;
    return sigqueue(pid, SIGUSR1, v) == 0 ? 0 : FTC_EIO;
}
