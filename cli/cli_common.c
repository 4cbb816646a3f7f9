/*
 * cli_common.c — what every `ftc` subcommand shares (see cli.h): the option
 * parser that layers command flags, config flags, FTC_* environment and
 * --config FILE; usage errors; classifying a path (shard, .ftcz, version
 * directory, persist directory); and loading the shards a path holds through
 * the ckpt modules.
 */
#include "cli/cli.h"

#include "ckpt/zshard.h"
#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- messages --------------------------------------------------------------- */

/* The usage lines: the help text up to its first blank line. */
static void ftc__cli_usage(const ftc_cli_cmd_t *cmd, FILE *out)
{
    const char *h = cmd->help;
    const char *end = strstr(h, "\n\n");
    fprintf(out, "%.*s\n", (int)(end ? end - h : (ptrdiff_t)strlen(h)), h);
    fprintf(out, "Run 'ftc help %s' for details.\n", cmd->name);
}

/* "ftc CMD: " and the formatted message, one line on stderr. */
static void __attribute__((format(printf, 2, 0)))
ftc__cli_vsay(const ftc_cli_cmd_t *cmd, const char *fmt, va_list ap)
{
    fprintf(stderr, "ftc %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int ftc_cli_usage_error(const ftc_cli_cmd_t *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ftc__cli_vsay(cmd, fmt, ap);
    va_end(ap);
    ftc__cli_usage(cmd, stderr);
    return FTC_EXIT_USAGE;
}

int ftc_cli_fail(const ftc_cli_cmd_t *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ftc__cli_vsay(cmd, fmt, ap);
    va_end(ap);
    return FTC_EXIT_FAIL;
}

int ftc_cli_redis_error(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, int rc,
                        const ftc_err_t *err)
{
    if (rc != FTC_ECONFIG)
        return ftc_cli_fail(cmd, "%s", ftc_err_str(err));
    int src = ftc_config_source(a->cfg, FTC_CFG_REDIS_URL);
    const char *from = src == FTC_SRC_FLAG  ? "--redis"
                       : src == FTC_SRC_ENV ? "FTC_REDIS_URL"
                       : src == FTC_SRC_FILE ? "the --config file"
                                             : NULL; /* the job's URL file: the message names it */
    if (!from)
        return ftc_cli_usage_error(cmd, "%s", ftc_err_str(err));
    return ftc_cli_usage_error(cmd, "redis.url (from %s): %s", from, ftc_err_str(err));
}

void ftc_cli_print_help(const ftc_cli_cmd_t *cmd, FILE *out)
{
    fputs(cmd->help, out);
    fputs(FTC_CLI_COMMON_HELP, out);
}

const char *ftc_cli_bytes(uint64_t n, char buf[32])
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4)
        v /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, 32, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

/* ---- option parsing ------------------------------------------------------------ */

static int ftc__cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || !isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int ftc__cli_set_opt(const ftc_cli_cmd_t *cmd, const ftc_cli_opt_t *o, const char *val)
{
    switch (o->kind) {
    case FTC_OPT_FLAG:
        *(bool *)o->dest = true;
        break;
    case FTC_OPT_STR:
        *(const char **)o->dest = val;
        break;
    case FTC_OPT_U64:
        if (ftc__cli_parse_u64(val, (uint64_t *)o->dest) != 0)
            return ftc_cli_usage_error(cmd, "%s wants a non-negative integer, not '%s'", o->name,
                                       val);
        break;
    case FTC_OPT_SIZE: {
        int64_t v;
        if (ftc_parse_size(val, &v) != 0 || v < 0)
            return ftc_cli_usage_error(cmd, "%s wants a size such as 4096, 64MiB or 1G, not '%s'",
                                       o->name, val);
        *(uint64_t *)o->dest = (uint64_t)v;
        break;
    }
    }
    if (o->seen)
        *o->seen = true;
    return 0;
}

/* "--nproc_per_node=2" -> "--nproc-per-node=2": torchrun's (argparse's)
 * spelling of every long option; the value after '=' is left as it is. */
static void ftc__cli_norm(const char *arg, char *out, size_t cap)
{
    size_t k = 0;
    bool in_name = arg[0] == '-' && arg[1] == '-';
    for (const char *p = arg; *p && k + 1 < cap; p++) {
        if (*p == '=')
            in_name = false;
        out[k++] = in_name && p > arg + 1 && *p == '_' ? '-' : *p;
    }
    out[k] = '\0';
}

/* The parser of ftc_cli_parse and ftc_cli_parse_until (rest != NULL: stop at
 * the first positional or after "--", and say where). */
static int ftc__cli_parse(const ftc_cli_cmd_t *cmd, int argc, char **argv,
                          const ftc_cli_opt_t *opts, int n, int minpos, int maxpos, int *rest,
                          ftc_cli_args_t *a)
{
    memset(a, 0, sizeof *a);
    a->fault.op = -1;
    a->cfg = ftc_config_create();
    if (!a->cfg) {
        fprintf(stderr, "ftc %s: out of memory\n", cmd->name);
        return FTC_EXIT_FAIL;
    }
    if (maxpos > (int)(sizeof a->pos / sizeof a->pos[0]))
        maxpos = (int)(sizeof a->pos / sizeof a->pos[0]);
    if (rest)
        *rest = argc;
    const char *config_file = NULL;
    ftc_err_t err = {0};
    int rc = FTC_EXIT_USAGE;
    bool only_pos = false;
    char norm[4352];
    for (int i = 1; i < argc;) {
        const char *raw = argv[i];
        if (only_pos || raw[0] != '-' || !raw[1]) {
            if (rest) {
                *rest = i;
                break;
            }
            if (a->npos >= maxpos) {
                ftc_cli_usage_error(cmd, "unexpected argument '%s'", raw);
                goto fail;
            }
            a->pos[a->npos++] = argv[i++];
            continue;
        }
        if (!strcmp(raw, "--")) {
            only_pos = true;
            i++;
            if (rest) {
                *rest = i;
                break;
            }
            continue;
        }
        if (!strcmp(raw, "-h") || !strcmp(raw, "--help")) {
            ftc_cli_print_help(cmd, stdout);
            rc = FTC_EXIT_OK;
            goto fail;
        }
        if (strlen(raw) >= sizeof norm) {
            ftc_cli_usage_error(cmd, "argument too long (%zu bytes)", strlen(raw));
            goto fail;
        }
        ftc__cli_norm(raw, norm, sizeof norm);
        const char *arg = norm;
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        const ftc_cli_opt_t *o = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(opts[k].name) == nlen && !strncmp(opts[k].name, arg, nlen))
                o = &opts[k];
        /* a short option with its value attached, as argparse takes it: -r3 */
        const char *attached = NULL;
        for (int k = 0; !o && arg[1] != '-' && !eq && arg[2] && k < n; k++)
            if (strlen(opts[k].name) == 2 && opts[k].name[0] == '-' &&
                opts[k].name[1] == arg[1] && opts[k].kind != FTC_OPT_FLAG)
                o = &opts[k], attached = raw + 2;
        bool is_config = nlen == 8 && !strncmp(arg, "--config", 8);
        if (o || is_config) {
            const char *val = NULL;
            if (attached) {
                val = attached;
            } else if (o && o->kind == FTC_OPT_FLAG) {
                if (eq) {
                    ftc_cli_usage_error(cmd, "%s takes no value", o->name);
                    goto fail;
                }
            } else if (eq) {
                val = raw + (eq - arg) + 1;
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                ftc_cli_usage_error(cmd, "%.*s needs a value", (int)nlen, arg);
                goto fail;
            }
            i++;
            if (is_config && config_file) { /* the first was dropped without a word */
                ftc_cli_usage_error(cmd, "--config given twice ('%s', then '%s'): give one "
                                         "file (put the settings of both in it)",
                                    config_file, val);
                goto fail;
            }
            if (is_config && !*val) { /* it said "--config : open : No such file ..." */
                ftc_cli_usage_error(cmd, "--config is empty: give a JSON file");
                goto fail;
            }
            if (is_config)
                config_file = val;
            else if (ftc__cli_set_opt(cmd, o, val) != 0)
                goto fail;
            continue;
        }
        /* a config flag, spelled as normalized; its value is the next argument */
        char *two[2] = {norm, i + 1 < argc ? argv[i + 1] : NULL};
        int j = 0;
        int c = ftc_config_parse_flag(a->cfg, i + 1 < argc ? 2 : 1, two, &j, &err);
        if (c < 0) {
            ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
            goto fail;
        }
        if (c == 0) {
            ftc_cli_usage_error(cmd, "unknown option '%s'", raw);
            goto fail;
        }
        i += j;
    }
    if (a->npos < minpos) {
        ftc_cli_usage_error(cmd, "missing argument (%d expected, %d given)", minpos, a->npos);
        goto fail;
    }
    /* Sources rank by kind, not by load order: flags stay above env and file. */
    if (ftc_config_load_env(a->cfg, NULL, &err) != 0) {
        ftc_cli_usage_error(cmd, "environment: %s", ftc_err_str(&err));
        goto fail;
    }
    if (config_file && ftc_config_load_file(a->cfg, config_file, &err) != 0) {
        /* the flag named: "open X: No such file" did not say which file X was */
        ftc_cli_usage_error(cmd, "--config %s: %s", config_file, ftc_err_str(&err));
        goto fail;
    }
    if (ftc_fault_parse(&a->fault, ftc_config_str(a->cfg, FTC_CFG_FAULT), &err) != 0) {
        ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
        goto fail;
    }
    int level = ftc_log_level_parse(ftc_config_str(a->cfg, FTC_CFG_LOG_LEVEL));
    if (level < 0) {
        ftc_cli_usage_error(cmd, "log.level '%s' is not debug, info, warn, error or off",
                            ftc_config_str(a->cfg, FTC_CFG_LOG_LEVEL));
        goto fail;
    }
    ftc_log_set_level(level); /* already flag over FTC_LOG_LEVEL over file */
    return FTC_CLI_CONTINUE;
fail:
    ftc_cli_args_free(a);
    return rc;
}

int ftc_cli_parse(const ftc_cli_cmd_t *cmd, int argc, char **argv, const ftc_cli_opt_t *opts,
                  int n, int minpos, int maxpos, ftc_cli_args_t *a)
{
    return ftc__cli_parse(cmd, argc, argv, opts, n, minpos, maxpos, NULL, a);
}

int ftc_cli_parse_until(const ftc_cli_cmd_t *cmd, int argc, char **argv,
                        const ftc_cli_opt_t *opts, int n, int *rest, ftc_cli_args_t *a)
{
    return ftc__cli_parse(cmd, argc, argv, opts, n, 0, 0, rest, a);
}

void ftc_cli_args_free(ftc_cli_args_t *a)
{
    ftc_config_destroy(a->cfg);
    a->cfg = NULL;
}

void ftc_cli_warn_ignored(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a,
                          const ftc_config_key_t *used, int n)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        if (k == FTC_CFG_LOG_LEVEL || ftc_config_source(a->cfg, (ftc_config_key_t)k) !=
                                          FTC_SRC_FLAG)
            continue;
        bool read = false;
        for (int i = 0; i < n && !read; i++)
            read = used[i] == (ftc_config_key_t)k;
        if (read)
            continue;
        const char *name = ftc_config_name((ftc_config_key_t)k);
        char flag[128];
        size_t o = 0;
        for (const char *p = name; *p && o + 1 < sizeof flag; p++)
            flag[o++] = *p == '.' || *p == '_' ? '-' : *p;
        flag[o] = '\0';
        fprintf(stderr, "ftc %s: warning: --%s (%s) is ignored by ftc %s\n", cmd->name, flag,
                name, cmd->name);
    }
}

/* ---- paths ---------------------------------------------------------------------- */

int ftc_cli_split_path(const char *path, char *dir, size_t dlen, const char **base,
                       ftc_err_t *err)
{
    int rc = ftc_fs_split_path(path, dir, dlen, base, err);
    if (rc)
        return rc;
    if (!**base)
        return ftc_err_set(err, FTC_EINVAL, "'%s' ends in '/': give a file name", path);
    return 0;
}

/* "v" + exactly 20 digits: the persist tier's own rule for a version directory */
static bool ftc__cli_version_name(const char *base)
{
    return strlen(base) == 21 && base[0] == 'v' && strspn(base + 1, "0123456789") == 20;
}

int ftc_cli_check_out(const ftc_cli_cmd_t *cmd, const char *what, const char *out,
                      const char *in)
{
    char dir[4096], real[PATH_MAX];
    const char *name = NULL;
    ftc_err_t err = {0};
    if (!*out)
        return ftc_cli_usage_error(cmd, "%s is empty: give a file name", what);
    if (ftc_cli_split_path(out, dir, sizeof dir, &name, &err) != 0)
        return ftc_cli_usage_error(cmd, "%s: %s", what, ftc_err_str(&err));
    struct stat so, si;
    if (stat(out, &so) == 0 && S_ISDIR(so.st_mode))
        return ftc_cli_usage_error(cmd, "%s %s is a directory: give a file name (%s/NAME)",
                                   what, out, out);
    if (!realpath(dir, real))
        return ftc_cli_fail(cmd, "%s %s: its directory %s: %s (create it first)", what, out,
                            dir, strerror(errno));
    const char *base = strrchr(real, '/');
    if (ftc__cli_version_name(base ? base + 1 : real))
        return ftc_cli_usage_error(cmd, "%s %s is in the version directory %s: writing there "
                                        "would destroy or pollute a committed checkpoint; write "
                                        "it outside every version directory",
                                   what, out, real);
    if (stat(out, &so) == 0 && stat(in, &si) == 0 && so.st_dev == si.st_dev &&
        so.st_ino == si.st_ino)
        return ftc_cli_usage_error(cmd, "%s %s is the input %s itself: writing it would destroy "
                                        "what it is read from; give another path",
                                   what, out, in);
    return FTC_CLI_CONTINUE;
}

int ftc_cli_classify(const char *path, ftc_cli_path_t *out, ftc_err_t *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0)
        return ftc_err_errno(err, errno, "%s", path);
    if (S_ISREG(st.st_mode)) {
        char magic[8] = {0};
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return ftc_err_errno(err, errno, "open %s", path);
        ssize_t r = read(fd, magic, sizeof magic);
        close(fd);
        out->kind = (r == 8 && !memcmp(magic, "FTCSHARD", 8)) ? FTC_KIND_SHARD : FTC_KIND_ZSHARD;
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return ftc_err_set(err, FTC_EINVAL, "%s is neither a file nor a directory", path);
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len >= sizeof out->persist_dir)
        return ftc_err_set(err, FTC_EINVAL, "path too long: %s", path);
    char buf[sizeof out->persist_dir];
    memcpy(buf, path, len);
    buf[len] = '\0';
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    /* the persist tier's own rule (persist-format.md): "v" + exactly 20
     * digits; a persist directory that is merely named v2 is no version */
    bool version = ftc__cli_version_name(base);
    if (!version) {
        out->kind = FTC_KIND_PERSIST;
        memcpy(out->persist_dir, buf, len + 1);
        return 0;
    }
    out->kind = FTC_KIND_VERSION;
    out->step = strtoull(base + 1, NULL, 10);
    if (base == buf) {
        snprintf(out->persist_dir, sizeof out->persist_dir, ".");
    } else {
        size_t dl = (size_t)(base - buf) - 1;
        memcpy(out->persist_dir, buf, dl ? dl : 1);
        out->persist_dir[dl ? dl : 1] = '\0';
    }
    return 0;
}

ftc_persist_t *ftc_cli_persist_open(const char *dir, const ftc_cli_args_t *a, ftc_err_t *err)
{
    (void)a;
    return ftc_persist_open_reader(dir, err);
}

ftc_persist_t *ftc_cli_persist_open_writer(const char *dir, const ftc_cli_args_t *a,
                                           ftc_err_t *err)
{
    ftc_persist_options_t opts = FTC_PERSIST_OPTIONS_INIT;
    ftc_persist_options_from_config(&opts, a->cfg);
    opts.fault = (ftc_fault_t *)&a->fault;
    return ftc_persist_open(dir, &opts, err);
}

int ftc_cli_read_file(const char *path, uint8_t **out, size_t *len, ftc_err_t *err)
{
    uint8_t head[FTC_ZSHARD_HEADER_SIZE];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait for a writer */
    if (fd < 0)
        return ftc_err_errno(err, errno, "open %s", path);
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    if (n < 8 || !memcmp(head, "FTCSHARD", 8) || !memcmp(head, "FTCZSHRD", 8))
        return ftc_fs_read_file(path, SIZE_MAX / 2, out, len, err);
    /* neither magic: the readers reject the first bytes as they would the whole */
    *out = malloc((size_t)n);
    if (!*out)
        return ftc_err_set(err, FTC_ENOMEM, "%s: out of memory", path);
    memcpy(*out, head, (size_t)n);
    *len = (size_t)n;
    return 0;
}

/* Reads a file and validates it as a raw shard (every checksum). */
static int ftc__cli_load_file(const char *path, int kind, uint8_t **buf, uint64_t *size,
                              ftc_err_t *err)
{
    uint8_t *file = NULL;
    size_t len = 0;
    int rc = ftc_cli_read_file(path, &file, &len, err);
    if (rc)
        return rc;
    if (kind == FTC_KIND_ZSHARD) {
        ftc_zshard_info_t zi;
        rc = ftc_zshard_info(file, len, &zi, err);
        if (rc) {
            free(file);
            return ftc_err_wrap(err, "%s (not a raw shard: no FTCSHARD magic; as .ftcz)", path);
        }
        if (zi.base_step != UINT64_MAX) {
            free(file);
            return ftc_err_set(err, FTC_EUNSUPPORTED,
                               "%s is a delta against step %llu and cannot be decoded alone: "
                               "give its version directory or the persist directory instead",
                               path, (unsigned long long)zi.base_step);
        }
        uint8_t *raw = NULL;
        uint64_t raw_size = 0;
        rc = ftc_zshard_decode(file, len, NULL, 0, &raw, &raw_size, err);
        free(file);
        if (rc)
            return ftc_err_wrap(err, "%s", path);
        file = raw;
        len = raw_size;
    }
    ftc_shard_view_t v;
    rc = ftc_shard_open(&v, file, len, FTC_SHARD_VERIFY, err);
    if (rc) {
        free(file);
        return ftc_err_wrap(err, "%s", path);
    }
    *buf = file;
    *size = len;
    return 0;
}

int ftc_cli_load_shards(const char *path, uint64_t step, const ftc_cli_args_t *a,
                        ftc_cli_shards_t *out, ftc_err_t *err)
{
    memset(out, 0, sizeof *out);
    ftc_cli_path_t cp;
    int rc = ftc_cli_classify(path, &cp, err);
    if (rc)
        return rc;
    if (cp.kind == FTC_KIND_SHARD || cp.kind == FTC_KIND_ZSHARD) {
        out->buf = calloc(1, sizeof *out->buf);
        out->size = calloc(1, sizeof *out->size);
        if (!out->buf || !out->size) {
            ftc_cli_shards_free(out);
            return ftc_err_set(err, FTC_ENOMEM, "out of memory");
        }
        rc = ftc__cli_load_file(path, cp.kind, &out->buf[0], &out->size[0], err);
        if (rc) {
            ftc_cli_shards_free(out);
            return rc;
        }
        out->n = 1;
        ftc_shard_view_t v;
        ftc_shard_open(&v, out->buf[0], out->size[0], 0, NULL);
        out->step = v.info.step;
        if (step != FTC_PERSIST_NEWEST && step != v.info.step) { /* never silently ignored */
            ftc_cli_shards_free(out);
            return ftc_err_set(err, FTC_EINVAL, "%s is a single shard file of step %llu, but "
                               "step %llu was asked for: drop --step, or give the persist "
                               "directory that holds that step", path,
                               (unsigned long long)v.info.step, (unsigned long long)step);
        }
        return 0;
    }
    if (cp.kind == FTC_KIND_VERSION) {
        if (step != FTC_PERSIST_NEWEST && step != cp.step)
            return ftc_err_set(err, FTC_EINVAL, "%s is step %llu, but step %llu was asked for",
                               path, (unsigned long long)cp.step, (unsigned long long)step);
        step = cp.step;
    }
    ftc_persist_t *p = ftc_cli_persist_open(cp.persist_dir, a, err);
    if (!p)
        return err && err->code ? err->code : FTC_EIO;
    rc = ftc_persist_load(p, step, &out->loaded);
    if (rc) {
        rc = ftc_err_set(err, rc, "%s", ftc_persist_errstr(p));
        ftc_persist_close(p);
        return rc;
    }
    ftc_persist_close(p);
    out->n = out->loaded->n_shards;
    out->buf = out->loaded->shards;
    out->size = out->loaded->sizes;
    out->step = out->loaded->step;
    out->fallbacks = out->loaded->fallbacks;
    return 0;
}

void ftc_cli_shards_free(ftc_cli_shards_t *s)
{
    if (!s)
        return;
    if (s->loaded) {
        ftc_persist_loaded_free(s->loaded);
    } else {
        for (int i = 0; i < s->n; i++)
            free(s->buf[i]);
        free(s->buf);
        free(s->size);
    }
    memset(s, 0, sizeof *s);
}
