/*
 * config.c — see config.h. The key table is the schema: parsing, typing,
 * range checks, environment names and flag names all come from it.
 */
#include "core/config.h"
#include "core/fsio.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

enum ftc__cfg_type { FTC__T_STR, FTC__T_INT, FTC__T_SIZE, FTC__T_BOOL };
#define FTC__T(type) FTC__T_##type

typedef struct ftc__cfg_def {
    const char *name; /* dotted name */
    int type;         /* ftc__cfg_type */
    const char *def;  /* default, as text */
    long long lo, hi; /* allowed range for INT and SIZE */
    const char *doc;  /* one sentence for --help */
} ftc__cfg_def_t;

static const ftc__cfg_def_t ftc__cfg_defs[FTC_CFG__COUNT] = {
#define FTC__CFG_DEF(id, name, type, def, lo, hi, doc) {name, FTC__T(type), def, lo, hi, doc},
    FTC_CONFIG_KEYS(FTC__CFG_DEF)
#undef FTC__CFG_DEF
};

typedef struct ftc__cfg_val {
    int source;  /* ftc_config_source that set it */
    int64_t num; /* INT, SIZE, BOOL */
    char *str;   /* STR (owned); persist.shuffle: its filter name */
} ftc__cfg_val_t;

struct ftc_config {
    ftc__cfg_val_t v[FTC_CFG__COUNT];
};

static const char *ftc__src_name[] = {"default", "file", "env", "flag"};

int ftc_parse_size(const char *s, int64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return FTC_EINVAL; /* digits first: strtoll would skip blanks and take a sign */
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || end == s || n < 0)
        return errno == ERANGE ? FTC_ERANGE : FTC_EINVAL;
    long long mul = 1;
    if (*end) {
        char u = (char)toupper((unsigned char)*end);
        mul = u == 'K'   ? 1ll << 10
              : u == 'M' ? 1ll << 20
              : u == 'G' ? 1ll << 30
              : u == 'T' ? 1ll << 40
                         : 0;
        if (!mul)
            return FTC_EINVAL;
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") || !*end)
            ;
        else
            return FTC_EINVAL;
    }
    if (n > LLONG_MAX / mul)
        return FTC_ERANGE;
    *out = n * mul;
    return 0;
}

int ftc_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '-' || *s == '+'))
        return FTC_EINVAL;
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (end == s || *end || !isdigit((unsigned char)end[-1]))
        return FTC_EINVAL;
    if (errno == ERANGE || n < min || n > max)
        return FTC_ERANGE;
    *out = n;
    return 0;
}

int ftc_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || strspn(s, "0123456789") != strlen(s))
        return FTC_EINVAL;
    errno = 0;
    unsigned long long n = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return FTC_ERANGE;
    *out = n;
    return 0;
}

bool ftc_next_word(const char **p, char *out, size_t cap)
{
    const char *b = *p;
    while (*b && isspace((unsigned char)*b))
        b++;
    const char *e = b;
    while (*e && !isspace((unsigned char)*e))
        e++;
    if (e == b || (size_t)(e - b) >= cap)
        return false;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = 0;
    *p = e;
    return true;
}

static int ftc__cfg_lookup(const char *name)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++)
        if (!strcmp(ftc__cfg_defs[k].name, name))
            return k;
    return -1;
}

/* 1 or 0 for the spellings of a boolean, -1 for any other text. */
static int ftc__cfg_bool_word(const char *text)
{
    if (!strcmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes") ||
        !strcasecmp(text, "on"))
        return 1;
    if (!strcmp(text, "0") || !strcasecmp(text, "false") || !strcasecmp(text, "no") ||
        !strcasecmp(text, "off"))
        return 0;
    return -1;
}

/* persist.shuffle: once a boolean (byte shuffle on/off), now a filter name;
 * the boolean spellings keep working: true = the default filter ("byte",
 * FTC_ZSHARD_FILTER_DEFAULT in ckpt/persist.h), false = "none". num is the
 * boolean (any filter), str the name. */
static int ftc__cfg_assign_filter(ftc__cfg_val_t *v, const char *text, int source,
                                  const char *origin, ftc_err_t *err)
{
    static const char *const names[3] = {"none", "byte", "bit"};
    int f = -1;
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(text, names[i]))
            f = i;
    if (f < 0 && ftc__cfg_bool_word(text) >= 0)
        f = ftc__cfg_bool_word(text); /* true = byte (1), false = none (0) */
    if (f < 0)
        return ftc_err_set(err, FTC_ECONFIG,
                           "config persist.shuffle (from %s): '%s' is not a filter; use none, "
                           "byte or bit (or a boolean: true = byte, false = none)",
                           origin, text);
    char *s = strdup(names[f]);
    if (!s)
        return ftc_err_set(err, FTC_ENOMEM, "config persist.shuffle: out of memory");
    free(v->str);
    v->str = s;
    v->num = f != 0;
    v->source = source;
    return 0;
}

static bool ftc__cfg_job_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

/* Parses text into slot k; origin names where it came from for errors. */
static int ftc__cfg_assign(ftc_config_t *cfg, int k, const char *text, int source,
                           const char *origin, ftc_err_t *err)
{
    const ftc__cfg_def_t *d = &ftc__cfg_defs[k];
    ftc__cfg_val_t *v = &cfg->v[k];
    if (v->source > source)
        return 0; /* a higher source already set it */
    int64_t num = 0;
    switch (d->type) {
    case FTC__T_STR: {
        /* the job id names files, shm slots and Redis keys: checked here, as
         * ftc_ctl_create and the rendezvous check it, not first in a node */
        if (k == FTC_CFG_JOB_ID && !ftc__cfg_job_id_ok(text))
            return ftc_err_set(err, FTC_ECONFIG,
                               "config job.id (from %s): '%.80s' is not a job id; use 1..63 "
                               "characters of A-Z a-z 0-9 . _ -",
                               origin, text);
        char *s = strdup(text);
        if (!s)
            return ftc_err_set(err, FTC_ENOMEM, "config %s: out of memory", d->name);
        free(v->str);
        v->str = s;
        v->source = source;
        return 0;
    }
    case FTC__T_BOOL:
        if (k == FTC_CFG_PERSIST_SHUFFLE) /* none | byte | bit, or a boolean */
            return ftc__cfg_assign_filter(v, text, source, origin, err);
        num = ftc__cfg_bool_word(text);
        if (num < 0)
            return ftc_err_set(err, FTC_ECONFIG,
                               "config %s (from %s): '%s' is not a boolean; use true or false",
                               d->name, origin, text);
        break;
    case FTC__T_INT: {
        /* strictly (ftc_parse_int): strtoll took " 3" for 3; the range is checked below */
        int rc = ftc_parse_int(text, INT64_MIN, INT64_MAX, &num);
        if (rc == FTC_ERANGE)
            return ftc_err_set(err, FTC_ECONFIG,
                               "config %s (from %s): '%s' is out of range [%lld, %lld]",
                               d->name, origin, text, d->lo, d->hi);
        if (rc != 0)
            return ftc_err_set(err, FTC_ECONFIG,
                               "config %s (from %s): '%s' is not an integer (decimal digits, "
                               "an optional sign, nothing around them)",
                               d->name, origin, text);
        break;
    }
    case FTC__T_SIZE:
        if (ftc_parse_size(text, &num) != 0)
            return ftc_err_set(err, FTC_ECONFIG,
                               "config %s (from %s): '%s' is not a size; write e.g. 4096, "
                               "64KiB, 4MiB or 1GiB",
                               d->name, origin, text);
        break;
    }
    if (d->type != FTC__T_BOOL && (num < d->lo || num > d->hi))
        return ftc_err_set(err, FTC_ECONFIG,
                           "config %s (from %s): %lld is out of range [%lld, %lld]", d->name,
                           origin, (long long)num, d->lo, d->hi);
    v->num = num;
    v->source = source;
    return 0;
}

ftc_config_t *ftc_config_create(void)
{
    ftc_config_t *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        /* defaults are part of the table and always parse */
        if (ftc__cfg_assign(cfg, k, ftc__cfg_defs[k].def, FTC_SRC_DEFAULT, "default", NULL) != 0) {
            ftc_config_destroy(cfg);
            return NULL;
        }
    }
    return cfg;
}

void ftc_config_destroy(ftc_config_t *cfg)
{
    if (!cfg)
        return;
    for (int k = 0; k < FTC_CFG__COUNT; k++)
        free(cfg->v[k].str);
    free(cfg);
}

/* Deep copy of src's values into dst (uninitialised); on FTC_ENOMEM dst
 * holds nothing to free. */
static int ftc__cfg_copy(ftc_config_t *dst, const ftc_config_t *src, ftc_err_t *err)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        dst->v[k] = src->v[k];
        if (src->v[k].str && !(dst->v[k].str = strdup(src->v[k].str))) {
            for (int j = 0; j < k; j++)
                free(dst->v[j].str);
            return ftc_err_set(err, FTC_ENOMEM, "config: out of memory copying the config");
        }
    }
    return 0;
}

/* Whether some key's dotted name starts with "prefix." (a group of keys). */
static bool ftc__cfg_is_group(const char *prefix)
{
    size_t n = strlen(prefix);
    for (int k = 0; k < FTC_CFG__COUNT; k++)
        if (!strncmp(ftc__cfg_defs[k].name, prefix, n) && ftc__cfg_defs[k].name[n] == '.')
            return true;
    return false;
}

/* Walks a JSON object; prefix is the dotted path so far. seen[k]: key k was
 * already given in this file (flat and nested spellings of one key). */
static int ftc__cfg_walk(ftc_config_t *cfg, json_t *obj, const char *prefix, const char *origin,
                         int depth, bool *seen, ftc_err_t *err)
{
    const char *key;
    json_t *val;
    if (depth > 8)
        return ftc_err_set(err, FTC_ECONFIG, "%s: objects nested deeper than 8 levels", origin);
    json_object_foreach(obj, key, val)
    {
        char name[256];
        int n = prefix[0] ? snprintf(name, sizeof name, "%s.%s", prefix, key)
                          : snprintf(name, sizeof name, "%s", key);
        if (n < 0 || (size_t)n >= sizeof name)
            return ftc_err_set(err, FTC_ECONFIG, "%s: key '%.64s...' is too long", origin, key);
        int k = ftc__cfg_lookup(name);
        if (k < 0 && json_is_object(val) && ftc__cfg_is_group(name)) {
            int rc = ftc__cfg_walk(cfg, val, name, origin, depth + 1, seen, err);
            if (rc)
                return rc;
            continue;
        }
        if (k < 0)
            return ftc_err_set(err, FTC_ECONFIG,
                               "%s: unknown key '%s' (run `ftc help config` for the list)",
                               origin, name);
        if (seen[k])
            return ftc_err_set(err, FTC_ECONFIG,
                               "%s: key '%s' is given twice (flat and nested spellings of "
                               "one key); keep one",
                               origin, name);
        seen[k] = true;
        char text[64];
        const char *s = text;
        if (json_is_string(val))
            s = json_string_value(val);
        else if (json_is_integer(val))
            snprintf(text, sizeof text, "%lld", (long long)json_integer_value(val));
        else if (json_is_boolean(val) && ftc__cfg_defs[k].type == FTC__T_STR)
            /* {"persist": {"dir": true}} is a mistake, not a directory named "true" */
            return ftc_err_set(err, FTC_ECONFIG,
                               "%s: key '%s' takes a string, not %s (quote it if you mean "
                               "the text)",
                               origin, name, json_is_true(val) ? "true" : "false");
        else if (json_is_boolean(val))
            snprintf(text, sizeof text, "%s", json_is_true(val) ? "true" : "false");
        else
            return ftc_err_set(err, FTC_ECONFIG,
                               "%s: key '%s' must be a string, integer or boolean", origin, name);
        int rc = ftc__cfg_assign(cfg, k, s, FTC_SRC_FILE, origin, err);
        if (rc)
            return rc;
    }
    return 0;
}

int ftc_config_load_json(ftc_config_t *cfg, const char *json, size_t len, const char *origin,
                         ftc_err_t *err)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ftc_err_set(err, FTC_ECONFIG, "%s:%d:%d: %s", origin, je.line, je.column, je.text);
    int rc;
    if (!json_is_object(root))
        rc = ftc_err_set(err, FTC_ECONFIG, "%s: the top level must be a JSON object", origin);
    else {
        /* All or nothing: the file is applied to a scratch copy, which
         * replaces cfg's values only when every key parsed; an error part-way
         * leaves cfg exactly as it was. */
        ftc_config_t scratch;
        rc = ftc__cfg_copy(&scratch, cfg, err);
        if (rc == 0) {
            bool seen[FTC_CFG__COUNT] = {false};
            rc = ftc__cfg_walk(&scratch, root, "", origin, 0, seen, err);
            if (rc == 0)
                for (int k = 0; k < FTC_CFG__COUNT; k++) {
                    ftc__cfg_val_t old = cfg->v[k];
                    cfg->v[k] = scratch.v[k];
                    scratch.v[k] = old; /* freed below */
                }
            for (int k = 0; k < FTC_CFG__COUNT; k++)
                free(scratch.v[k].str);
        }
    }
    json_decref(root);
    return rc;
}

int ftc_config_load_file(ftc_config_t *cfg, const char *path, ftc_err_t *err)
{
    uint8_t *buf;
    size_t len;
    int rc = ftc_fs_read_file(path, 1u << 20, &buf, &len, err);
    if (rc)
        return rc;
    rc = ftc_config_load_json(cfg, (const char *)buf, len, path, err);
    free(buf);
    return rc;
}

/* "persist.chunk_bytes" -> "FTC_PERSIST_CHUNK_BYTES" or "--persist-chunk-bytes". */
static void ftc__cfg_spell(const char *name, char *out, size_t cap, bool env)
{
    size_t o = 0;
    const char *pre = env ? "FTC_" : "--";
    for (const char *p = pre; *p && o + 1 < cap; p++)
        out[o++] = *p;
    for (const char *p = name; *p && o + 1 < cap; p++) {
        char c = *p;
        if (c == '.' || c == '_')
            c = env ? '_' : '-';
        out[o++] = env ? (char)toupper((unsigned char)c) : c;
    }
    out[o] = '\0';
}

int ftc_config_load_env(ftc_config_t *cfg, char *const *envp, ftc_err_t *err)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        char var[128];
        ftc__cfg_spell(ftc__cfg_defs[k].name, var, sizeof var, true);
        const char *val = NULL;
        if (!envp) {
            val = getenv(var);
        } else {
            size_t n = strlen(var);
            for (char *const *e = envp; *e; e++)
                if (!strncmp(*e, var, n) && (*e)[n] == '=')
                    val = *e + n + 1;
        }
        if (!val)
            continue;
        int rc = ftc__cfg_assign(cfg, k, val, FTC_SRC_ENV, var, err);
        if (rc)
            return rc;
    }
    return 0;
}

int ftc_config_set(ftc_config_t *cfg, const char *name, const char *value, int source,
                   ftc_err_t *err)
{
    if (!name || !value || source < FTC_SRC_DEFAULT || source > FTC_SRC_FLAG)
        return ftc_err_set(err, FTC_EINVAL,
                           "config set %s: %s (source %d must be FTC_SRC_DEFAULT..FTC_SRC_FLAG)",
                           name ? name : "(NULL key)", value ? "bad source" : "NULL value",
                           source);
    int k = ftc__cfg_lookup(name);
    if (k < 0)
        return ftc_err_set(err, FTC_ECONFIG, "unknown config key '%s'", name);
    return ftc__cfg_assign(cfg, k, value, source, ftc__src_name[source], err);
}

/* Short spellings users expect from other launchers. */
static const struct {
    const char *flag, *key;
} ftc__cfg_aliases[] = {{"--redis", "redis.url"}, {"--job", "job.id"}};

/* Whether text is a value of boolean key k: a boolean's spelling, or for
 * persist.shuffle a filter's name too. */
static bool ftc__cfg_bool_value(int k, const char *text)
{
    if (ftc__cfg_bool_word(text) >= 0)
        return true;
    return k == FTC_CFG_PERSIST_SHUFFLE &&
           (!strcasecmp(text, "none") || !strcasecmp(text, "byte") || !strcasecmp(text, "bit"));
}

int ftc_config_parse_flag(ftc_config_t *cfg, int argc, char **argv, int *i, ftc_err_t *err)
{
    const char *arg = argv[*i];
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    const char *eq = strchr(arg, '=');
    size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        char flag[128];
        ftc__cfg_spell(ftc__cfg_defs[k].name, flag, sizeof flag, false);
        bool match = strlen(flag) == flen && strncmp(flag, arg, flen) == 0;
        for (size_t a = 0; !match && a < sizeof ftc__cfg_aliases / sizeof ftc__cfg_aliases[0]; a++)
            match = !strcmp(ftc__cfg_aliases[a].key, ftc__cfg_defs[k].name) &&
                    strlen(ftc__cfg_aliases[a].flag) == flen &&
                    !strncmp(ftc__cfg_aliases[a].flag, arg, flen);
        if (!match)
            continue;
        const char *val;
        const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
        if (eq) {
            val = eq + 1;
        } else if (ftc__cfg_defs[k].type == FTC__T_BOOL &&
                   !(next && ftc__cfg_bool_value(k, next))) {
            /* a bare boolean flag turns it on; the next argument is not its
             * value unless it spells one (`--persist-delta train.py`: the
             * script stays the script) */
            val = "true";
        } else if (next) {
            val = argv[++*i];
        } else {
            return ftc_err_set(err, FTC_ECONFIG, "%s needs a value", flag);
        }
        int rc = ftc__cfg_assign(cfg, k, val, FTC_SRC_FLAG, flag, err);
        if (rc)
            return rc;
        ++*i;
        return 1;
    }
    return 0;
}

const char *ftc_config_str(const ftc_config_t *cfg, ftc_config_key_t key)
{
    return cfg->v[key].str ? cfg->v[key].str : "";
}

int64_t ftc_config_int(const ftc_config_t *cfg, ftc_config_key_t key)
{
    return cfg->v[key].num;
}

bool ftc_config_bool(const ftc_config_t *cfg, ftc_config_key_t key)
{
    return cfg->v[key].num != 0;
}

int ftc_config_source(const ftc_config_t *cfg, ftc_config_key_t key)
{
    return cfg->v[key].source;
}

const char *ftc_config_name(ftc_config_key_t key)
{
    return ftc__cfg_defs[key].name;
}

void ftc_config_print(const ftc_config_t *cfg, FILE *out, bool help)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        const ftc__cfg_def_t *d = &ftc__cfg_defs[k];
        char flag[128], env[128];
        ftc__cfg_spell(d->name, flag, sizeof flag, false);
        ftc__cfg_spell(d->name, env, sizeof env, true);
        if (help) {
            fprintf(out, "  %-24s %-26s %s (default: %s)\n", flag, env, d->doc,
                    d->def[0] ? d->def : "\"\"");
            continue;
        }
        const ftc__cfg_val_t *v = &cfg->v[k];
        if (d->type == FTC__T_STR) {
            /* never print a password: scheme://user:SECRET@host -> *** */
            const char *sv = v->str ? v->str : "", *sch = strstr(sv, "://");
            const char *at = sch ? strchr(sch + 3, '@') : NULL;
            const char *colon = sch && at ? memchr(sch + 3, ':', (size_t)(at - sch - 3)) : NULL;
            if (colon)
                fprintf(out, "%-22s = \"%.*s***%s\"  (%s)\n", d->name, (int)(colon + 1 - sv), sv,
                        at, ftc__src_name[v->source]);
            else
                fprintf(out, "%-22s = \"%s\"  (%s)\n", d->name, sv, ftc__src_name[v->source]);
        }
        if (d->type == FTC__T_BOOL && v->str) /* persist.shuffle: the filter's name */
            fprintf(out, "%-22s = %s  (%s)\n", d->name, v->str, ftc__src_name[v->source]);
        else if (d->type == FTC__T_BOOL)
            fprintf(out, "%-22s = %s  (%s)\n", d->name, v->num ? "true" : "false",
                    ftc__src_name[v->source]);
        else if (d->type != FTC__T_STR)
            fprintf(out, "%-22s = %lld  (%s)\n", d->name, (long long)v->num,
                    ftc__src_name[v->source]);
    }
}
