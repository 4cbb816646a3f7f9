/*
 * control.c — see control.h. The Lua scripts are the protocol: each one
 * checks the fencing token (generation or lease epoch) and refuses with an
 * error reply whose first word names the reason (FTC_STALE, FTC_FENCED,
 * FTC_CORRUPT), which ftc__script_rc turns into an FTC_E* code.
 */
#include "detect/control.h"

#include "core/clock.h"
#include "core/config.h"

#include <ctype.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/random.h>

struct ftc_ctl {
    ftc_redis_t *r;     /* owned connection */
    char job[64];       /* job id */
    char prefix[80];    /* "ftc:{job}:" */
    ftc_err_t err;      /* last error */
    ftc_redis_script_t s_lease_acquire, s_lease_renew, s_lease_release, s_gen_bump, s_reseed,
        s_report, s_commit, s_withdraw, s_abort, s_leave;
};

/* Lua: int(key, field, absent) reads a field of hash key as the rendezvous reads gen
 * (recover/rendezvous.c): absent is `absent`; decimal digits below 2^53 (exact in a Lua
 * number) are the number; anything else returns nil and an FTC_CORRUPT message naming the
 * key, the field and its content. Plain tonumber took " 1", "0x1", "1e0" or "1.5" (and the
 * C readers' strtoll " 1" or "+1"): the scripts saw a generation the rendezvous calls
 * corrupt, and reseed took garbage for nothing and wrote over it. */
#define FTC__LUA_INT                                                                               \
    "local function int(key, field, absent)\n"                                                     \
    "  local raw = redis.call('HGET', key, field)\n"                                               \
    "  if not raw then return absent end\n"                                                        \
    "  local v = string.match(raw, '^%d+$') and tonumber(raw)\n"                                   \
    "  if v and v <= 9007199254740991 then return v end\n"                                         \
    "  return nil, 'FTC_CORRUPT ' .. key .. ' field ' .. field .. ' holds \"' .. "                 \
    "string.sub(raw, 1, 40) .. '\" (not a decimal integer below 2^53; fix or delete it)'\n"        \
    "end\n"

/* KEYS: members, hb, deadlines. ARGV: node. A member leaving: its record,
 * heartbeat and deadline go together (three commands left a deadline entry
 * behind when the caller died between them, and a later node_lost for a
 * node that had left cleanly). */
static const char ftc__lua_leave[] =
    "redis.call('HDEL', KEYS[1], ARGV[1])\n"
    "redis.call('DEL', KEYS[2])\n"
    "redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "return 1\n";

/* KEYS: leader, epoch. ARGV: holder, ttl_ms. Returns {held, epoch, holder}. A
 * holder that finds the lease still its own (it stepped down locally, paused
 * or cut off, before the key expired) gets a full TTL again: the caller
 * counts a whole lease from this call, and a key left to expire on its old
 * TTL let another node take it while the caller still called itself leader. */
static const char ftc__lua_lease_acquire[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur then\n"
    "  local h, ep = string.match(cur, '^(%S+) (%d+)$')\n"
    "  if not h then return redis.error_reply('FTC_CORRUPT leader key ' .. KEYS[1] .. "
    "' holds \"' .. string.sub(cur, 1, 40) .. '\" (expected \"holder epoch\"); delete it') end\n"
    "  local e = tonumber(ep)\n"
    "  if e > 9007199254740991 then return redis.error_reply('FTC_CORRUPT leader key ' .. "
    "KEYS[1] .. ' holds epoch ' .. string.sub(ep, 1, 40) .. ' (not below 2^53); delete it') end\n"
    "  if h == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
    "  return {h == ARGV[1] and 1 or 0, e, h}\n"
    "end\n"
    "local ep = redis.call('INCR', KEYS[2])\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ep, 'PX', ARGV[2])\n"
    "return {1, ep, ARGV[1]}\n";

/* KEYS: leader. ARGV: holder, epoch, ttl_ms. */
static const char ftc__lua_lease_renew[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] .. ' ' .. ARGV[2] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end\n"
    "return 0\n";

static const char ftc__lua_lease_release[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] .. ' ' .. ARGV[2] then\n"
    "  redis.call('DEL', KEYS[1]) return 1 end\n"
    "return 0\n";

/* KEYS: leader, gen, events. ARGV: holder, epoch, seen, world, reason, now_ms, cap. */
static const char ftc__lua_gen_bump[] =
    FTC__LUA_INT
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ' ' .. ARGV[2] then\n"
    "  return redis.error_reply('FTC_FENCED ' .. ARGV[1] .. ' epoch ' .. ARGV[2] .. "
    "' does not hold the leader lease') end\n"
    "local g, bad = int(KEYS[2], 'gen', 0)\n"
    "if bad then return redis.error_reply(bad) end\n"
    "if g ~= tonumber(ARGV[3]) then return redis.error_reply('FTC_STALE generation is ' .. g .. "
    "', not ' .. ARGV[3]) end\n"
    "g = g + 1\n"
    "redis.call('HSET', KEYS[2], 'gen', g, 'world', ARGV[4], 'epoch', ARGV[2], 'at_ms', ARGV[6])\n"
    "redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'kind', 'generation', 'node', "
    "ARGV[1], 'rank', '-1', 'gen', g, 'step', '-1', 'detail', ARGV[5], 't_fault_ms', '0', "
    "'t_detect_ms', ARGV[6])\n"
    "return g\n";

/* KEYS: gen, commit. ARGV: gen, world, step. Never moves a value backwards. A
 * generation put back by a rendezvous (rdzv_join after Redis lost its data)
 * has world 0 (unknown): an agent of that generation fills it in. Reads every
 * field before it writes any: a field holding garbage is FTC_CORRUPT and
 * nothing is written (it took garbage for 0 or -1 and wrote over it). */
static const char ftc__lua_reseed[] =
    FTC__LUA_INT
    "local g, bad = int(KEYS[1], 'gen', 0)\n"
    "if bad then return redis.error_reply(bad) end\n"
    "local w, bad2 = int(KEYS[1], 'world', 0)\n"
    "if bad2 then return redis.error_reply(bad2) end\n"
    "local s, bad3 = int(KEYS[2], 'step', -1)\n"
    "if bad3 then return redis.error_reply(bad3) end\n"
    "if g < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'world', ARGV[2])\n"
    "elseif g == tonumber(ARGV[1]) and tonumber(ARGV[2]) > 0 and w == 0 then\n"
    "  redis.call('HSET', KEYS[1], 'world', ARGV[2]) end\n"
    "if tonumber(ARGV[3]) >= 0 and s < tonumber(ARGV[3]) then\n"
    "  redis.call('HSET', KEYS[2], 'step', ARGV[3], 'gen', ARGV[1]) end\n"
    "return 1\n";

/* KEYS: dedupe hash, events. ARGV: id, now_ms, cap, ttl_ms (0 = keep), then field/value
 * pairs. */
static const char ftc__lua_report[] =
    "if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end\n"
    "if ARGV[4] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end\n"
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 5))\n"
    "return 1\n";

/* KEYS: gen, reports(gen,step), commit, events, committed. ARGV: gen, step, rank, checksum,
 * now_ms, cap, committed_cap. Returns {state, value}: 0 = waiting (value = reports so far),
 * 1 = committed now, 2 = already at or past this step (value = committed step). A step
 * committed is also added to the sorted set of committed steps (score the step, member
 * STEP:GEN), trimmed to its newest committed_cap. A step whose record holds the abort
 * marker (commit_abort: a rank's snapshot of it failed) is refused, FTC_ABORTED, in the
 * same script: it never commits (I3), however many reports come. */
static const char ftc__lua_commit[] =
    FTC__LUA_INT
    "local g, bad = int(KEYS[1], 'gen', false)\n"
    "if bad then return redis.error_reply(bad) end\n"
    "if not g then return redis.error_reply('FTC_STALE no generation is set') end\n"
    "local world, bad2 = int(KEYS[1], 'world', false)\n"
    "if bad2 then return redis.error_reply(bad2) end\n"
    "if not world or world > 16777216 then return redis.error_reply('FTC_CORRUPT ' .. KEYS[1] .. "
    "' has field gen but ' .. (world and ('world ' .. world .. ' (above 2^24)') or 'no field "
    "world')) end\n"
    "if world == 0 and g == tonumber(ARGV[1]) then return redis.error_reply('FTC_STALE "
    "generation ' .. g .. ' has no world size yet (its rendezvous closed; the layout is not "
    "published: ftc_rdzv_set_world)') end\n"
    "if g ~= tonumber(ARGV[1]) then return redis.error_reply('FTC_STALE generation ' .. ARGV[1] "
    ".. ' is not the current ' .. g) end\n"
    "if tonumber(ARGV[3]) >= world then return redis.error_reply('FTC_RANGE rank ' .. ARGV[3] .. "
    "' is not below world size ' .. world) end\n"
    "local cur, bad3 = int(KEYS[3], 'step', -1)\n"
    "if bad3 then return redis.error_reply(bad3) end\n"
    "if cur >= tonumber(ARGV[2]) then return {2, cur} end\n"
    "local ab = redis.call('HGET', KEYS[2], 'abort')\n"
    "if ab then return redis.error_reply('FTC_ABORTED ' .. KEYS[2] .. ': step ' .. ARGV[2] .. "
    "' was aborted (rank ' .. ab .. ')') end\n"
    "redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])\n"
    "redis.call('PEXPIRE', KEYS[2], 3600000)\n"
    "local n = redis.call('HLEN', KEYS[2])\n"
    "if n < world then return {0, n} end\n"
    "redis.call('HSET', KEYS[3], 'step', ARGV[2], 'gen', ARGV[1], 'at_ms', ARGV[5])\n"
    "redis.call('ZADD', KEYS[5], ARGV[2], ARGV[2] .. ':' .. ARGV[1])\n"
    "redis.call('ZREMRANGEBYRANK', KEYS[5], 0, -(tonumber(ARGV[7]) + 1))\n"
    "redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'kind', 'commit', 'node', '', "
    "'rank', '-1', 'gen', ARGV[1], 'step', ARGV[2], 'detail', 'all ' .. world .. ' ranks "
    "reported', 't_fault_ms', '0', 't_detect_ms', ARGV[5])\n"
    "return {1, tonumber(ARGV[2])}\n";

/* KEYS: reports(gen,step), commit. ARGV: step, rank. Takes a rank's report back
 * unless the record is at or past the step already. Returns {state, committed}:
 * 1 = withdrawn (or there was none), 0 = the record is at or past the step. */
static const char ftc__lua_withdraw[] =
    FTC__LUA_INT
    "local cur, bad = int(KEYS[2], 'step', -1)\n"
    "if bad then return redis.error_reply(bad) end\n"
    "if cur >= tonumber(ARGV[1]) then return {0, cur} end\n"
    "redis.call('HDEL', KEYS[1], ARGV[2])\n"
    "return {1, cur}\n";

/* KEYS: reports(gen,step), commit. ARGV: step, rank, why. A rank's snapshot of the step
 * failed: marks the record (field "abort" = "RANK why", the first marker kept) so that
 * commit_report refuses the step from now on, unless the record is at or past the step
 * already. Returns {state, committed}: 1 = marked (or marked before), 0 = at or past. */
static const char ftc__lua_abort[] =
    FTC__LUA_INT
    "local cur, bad = int(KEYS[2], 'step', -1)\n"
    "if bad then return redis.error_reply(bad) end\n"
    "if cur >= tonumber(ARGV[1]) then return {0, cur} end\n"
    "redis.call('HSETNX', KEYS[1], 'abort', ARGV[2] .. ' ' .. ARGV[3])\n"
    "redis.call('PEXPIRE', KEYS[1], 3600000)\n"
    "return {1, cur}\n";

static bool ftc__valid_id(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-' &&
            s[i] != ':' && s[i] != '/')
            return false;
    return true;
}

bool ftc_ctl_node_id_valid(const char *id)
{
    return id && ftc__valid_id(id, FTC_CTL_NODE_MAX);
}

ftc_ctl_t *ftc_ctl_create(ftc_redis_t *r, const char *job, ftc_err_t *err)
{
    if (!job || !ftc__valid_id(job, 63) || strchr(job, ':') || strchr(job, '/')) {
        ftc_err_set(err, FTC_EINVAL, "job id '%.80s' must be 1..63 characters of A-Z a-z 0-9 . _ -",
                    job ? job : "");
        return NULL;
    }
    ftc_ctl_t *c = calloc(1, sizeof *c);
    if (!c) {
        ftc_err_set(err, FTC_ENOMEM, "control: out of memory");
        return NULL;
    }
    c->r = r;
    snprintf(c->job, sizeof c->job, "%s", job);
    snprintf(c->prefix, sizeof c->prefix, "ftc:{%s}:", job);
    ftc_redis_script_init(&c->s_lease_acquire, "lease_acquire", ftc__lua_lease_acquire);
    ftc_redis_script_init(&c->s_lease_renew, "lease_renew", ftc__lua_lease_renew);
    ftc_redis_script_init(&c->s_lease_release, "lease_release", ftc__lua_lease_release);
    ftc_redis_script_init(&c->s_leave, "leave", ftc__lua_leave);
    ftc_redis_script_init(&c->s_gen_bump, "generation_bump", ftc__lua_gen_bump);
    ftc_redis_script_init(&c->s_reseed, "reseed", ftc__lua_reseed);
    ftc_redis_script_init(&c->s_report, "report", ftc__lua_report);
    ftc_redis_script_init(&c->s_commit, "commit_report", ftc__lua_commit);
    ftc_redis_script_init(&c->s_withdraw, "commit_withdraw", ftc__lua_withdraw);
    ftc_redis_script_init(&c->s_abort, "commit_abort", ftc__lua_abort);
    return c;
}

void ftc_ctl_destroy(ftc_ctl_t *c)
{
    if (!c)
        return;
    ftc_redis_close(c->r);
    free(c);
}

ftc_redis_t *ftc_ctl_redis(ftc_ctl_t *c) { return c->r; }
const char *ftc_ctl_errstr(const ftc_ctl_t *c) { return ftc_err_str(&c->err); }

const char *ftc_ctl_key(const ftc_ctl_t *c, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", c->prefix, suffix);
    return buf;
}

/* Copies the connection's error into the handle and maps script refusals. */
static int ftc__rc(ftc_ctl_t *c, int rc)
{
    const char *msg = ftc_redis_errstr(c->r);
    if (strstr(msg, "FTC_STALE"))
        rc = FTC_ESTALE;
    else if (strstr(msg, "FTC_FENCED"))
        rc = FTC_EAUTH;
    else if (strstr(msg, "FTC_CORRUPT"))
        rc = FTC_EPROTO;
    else if (strstr(msg, "FTC_RANGE"))
        rc = FTC_ERANGE;
    else if (strstr(msg, "FTC_ABORTED"))
        rc = FTC_ECANCELED;
    else if (strstr(msg, "WRONGTYPE"))
        rc = FTC_EPROTO; /* a key of the job holds another type: garbage, not an outage */
    return ftc_err_set(&c->err, rc, "%s", msg);
}

/* Runs a commit script whose reply is {state, value} (two integers). */
static int ftc__eval_pair(ftc_ctl_t *c, const ftc_redis_script_t *script, const char *name,
                          int nkeys, const char **keys, int nargs, const char **args,
                          long long *state, long long *val)
{
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_eval(c->r, script, nkeys, keys, nargs, args, &rep);
    if (rc)
        return ftc__rc(c, rc);
    ftc_redis_reply_t **el;
    size_t n;
    char what[64];
    rc = ftc_redis_want_array(rep, name, 2, &el, &n, &c->err);
    snprintf(what, sizeof what, "%s state", name);
    if (!rc)
        rc = ftc_redis_want_int(el[0], what, state, &c->err);
    snprintf(what, sizeof what, "%s value", name);
    if (!rc)
        rc = ftc_redis_want_int(el[1], what, val, &c->err);
    ftc_redis_reply_free(rep);
    return rc;
}

/* Runs script (name in errors), whose reply is one integer, into *v. */
static int ftc__eval_int(ftc_ctl_t *c, const ftc_redis_script_t *script, const char *name,
                         int nkeys, const char **keys, int nargs, const char **args, long long *v)
{
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_eval(c->r, script, nkeys, keys, nargs, args, &rep);
    if (rc)
        return ftc__rc(c, rc);
    rc = ftc_redis_want_int(rep, name, v, &c->err);
    ftc_redis_reply_free(rep);
    return rc;
}

/* The largest generation, world, committed step or generation the scripts read (Lua numbers
 * hold integers exactly below 2^53; the rendezvous reads gen so). */
#define FTC__INT_MAX 9007199254740991LL

/* Reads field of hash key from element e of an HMGET reply as the scripts do (FTC__LUA_INT):
 * decimal digits only, at most FTC__INT_MAX (strtoll took " 1", "+1" or a value the scripts
 * call corrupt). FTC_EPROTO naming the key, the field and its content otherwise. */
static int ftc__field_int(ftc_ctl_t *c, const ftc_redis_reply_t *e, const char *key,
                          const char *field, long long *v)
{
    const char *s = "";
    size_t len = 0;
    if (e && e->type == REDIS_REPLY_NIL)
        return ftc_err_set(&c->err, FTC_EPROTO, "%s has no field %s (fix or delete the key)", key,
                           field);
    int rc = ftc_redis_want_str(e, key, &s, &len, &c->err);
    if (rc)
        return rc;
    long long x = 0;
    bool ok = len > 0;
    for (size_t i = 0; ok && i < len; i++) {
        ok = s[i] >= '0' && s[i] <= '9' && x <= (FTC__INT_MAX - (s[i] - '0')) / 10;
        x = x * 10 + (s[i] - '0');
    }
    if (!ok)
        return ftc_err_set(&c->err, FTC_EPROTO, "%s field %s holds \"%.*s\" (not a decimal "
                           "integer below 2^53; fix or delete it)", key, field,
                           (int)(len > 40 ? 40 : len), s);
    *v = x;
    return 0;
}

/* Integer fields f1 and f2 of hash key, one HMGET read by ftc__field_int. *got is -1 when Redis
 * did not answer, else how many fields were read: 0 when the hash or f1 is missing or on an
 * error, 1 when f2 is missing and optional (!need2), 2 for both. *v1 and *v2 may be written
 * even when 0 is counted: use them as *got says. */
static int ftc__hget_ints(ftc_ctl_t *c, const char *key, const char *f1, const char *f2,
                          bool need2, long long *v1, long long *v2, int *got)
{
    ftc_redis_reply_t *rep, **el;
    size_t n;
    *got = -1;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "HMGET", key, f1, f2, NULL);
    if (rc)
        return ftc__rc(c, rc);
    *got = 0;
    rc = ftc_redis_want_array(rep, key, 2, &el, &n, &c->err);
    if (!rc && el[0]->type != REDIS_REPLY_NIL) {
        bool two = need2 || el[1]->type != REDIS_REPLY_NIL;
        rc = ftc__field_int(c, el[0], key, f1, v1);
        if (!rc && two)
            rc = ftc__field_int(c, el[1], key, f2, v2);
        *got = rc ? 0 : two ? 2 : 1;
    }
    ftc_redis_reply_free(rep);
    return rc;
}

#define KEY(var, ...)                                                                              \
    char var[256];                                                                                 \
    do {                                                                                           \
        char suffix__[160];                                                                        \
        snprintf(suffix__, sizeof suffix__, __VA_ARGS__);                                          \
        ftc_ctl_key(c, suffix__, var, sizeof var);                                                 \
    } while (0)

/* ---- membership and heartbeats ------------------------------------------------ */

int ftc_ctl_join(ftc_ctl_t *c, const ftc_ctl_member_t *m)
{
    if (!ftc__valid_id(m->node, FTC_CTL_NODE_MAX))
        return ftc_err_set(&c->err, FTC_EINVAL, "node id '%.80s' is not 1..%d of [A-Za-z0-9._:/-]",
                           m->node, FTC_CTL_NODE_MAX);
    KEY(members, "members");
    char val[400];
    snprintf(val, sizeof val, "%s %s %" PRId64 " %" PRIu64, m->host[0] ? m->host : "-",
             m->domain[0] ? m->domain : "-", m->pid, m->joined_ms);
    int rc = ftc_redis_cmdv(c->r, true, NULL, "HSET", members, m->node, val, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_leave(ftc_ctl_t *c, const char *node)
{
    KEY(members, "members");
    KEY(hb, "hb:%s", node);
    KEY(deadlines, "deadlines");
    const char *keys[] = {members, hb, deadlines};
    const char *args[] = {node};
    int rc = ftc_redis_eval(c->r, &c->s_leave, 3, keys, 1, args, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_heartbeat(ftc_ctl_t *c, const char *node, const ftc_ctl_heartbeat_t *hb, int ttl_ms)
{
    KEY(key, "hb:%s", node);
    KEY(deadlines, "deadlines");
    char val[128], px[24], due[24];
    snprintf(val, sizeof val, "%" PRIu64 " %" PRId64 " %" PRIu64 " %" PRIu64, hb->generation,
             hb->step, hb->step_time_us, hb->wall_ms);
    snprintf(px, sizeof px, "%d", ttl_ms);
    snprintf(due, sizeof due, "%" PRIu64, hb->wall_ms + (uint64_t)ttl_ms);
    /* the heartbeat and its deadline in one round trip */
    const char *set[] = {"SET", key, val, "PX", px};
    const char *zadd[] = {"ZADD", deadlines, due, node};
    const char **argvs[] = {set, zadd};
    const int argcs[] = {5, 4};
    int rc = ftc_redis_pipeline(c->r, true, 2, argcs, argvs, NULL, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_overdue(ftc_ctl_t *c, uint64_t now_ms, int offset,
                    char (*names)[FTC_CTL_NODE_MAX + 1], int max, int *n)
{
    KEY(deadlines, "deadlines");
    char upto[24], off[16], lim[16];
    snprintf(upto, sizeof upto, "%" PRIu64, now_ms);
    snprintf(off, sizeof off, "%d", offset < 0 ? 0 : offset);
    snprintf(lim, sizeof lim, "%d", max);
    ftc_redis_reply_t *rep;
    *n = 0;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "ZRANGEBYSCORE", deadlines, "-inf", upto, "LIMIT",
                            off, lim, NULL);
    if (rc)
        return ftc__rc(c, rc);
    ftc_redis_reply_t **el;
    size_t cnt;
    rc = ftc_redis_want_array(rep, deadlines, -1, &el, &cnt, &c->err);
    for (size_t i = 0; !rc && i < cnt && *n < max; i++)
        if (el[i]->type == REDIS_REPLY_STRING && el[i]->len <= FTC_CTL_NODE_MAX)
            snprintf(names[(*n)++], FTC_CTL_NODE_MAX + 1, "%s", el[i]->str);
    ftc_redis_reply_free(rep);
    return rc;
}

int ftc_ctl_forget_deadline(ftc_ctl_t *c, const char *node)
{
    KEY(deadlines, "deadlines");
    int rc = ftc_redis_cmdv(c->r, true, NULL, "ZREM", deadlines, node, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_heartbeat_parse(const char *s, size_t len, ftc_ctl_heartbeat_t *hb, ftc_err_t *err)
{
    char buf[128];
    if (len >= sizeof buf)
        return ftc_err_set(err, FTC_EPROTO, "heartbeat value of %zu bytes is too long", len);
    memcpy(buf, s, len);
    buf[len] = '\0';
    /* strtoull, not sscanf %llu: that takes "-1" as 2^64-1 and clamps values
     * out of range silently (a foreign value became a huge step time) */
    unsigned long long v[4] = {0};
    long long step = 0;
    const char *p = buf;
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) {
        char *end;
        if (i > 0 && *p++ != ' ')
            ok = false;
        else if (i == 1 ? !(isdigit((unsigned char)*p) || *p == '-') : !isdigit((unsigned char)*p))
            ok = false;
        else {
            errno = 0;
            if (i == 1)
                step = strtoll(p, &end, 10);
            else
                v[i] = strtoull(p, &end, 10);
            ok = errno == 0 && end != p;
            p = end;
        }
    }
    if (!ok || *p || step < -1)
        return ftc_err_set(err, FTC_EPROTO,
                           "heartbeat value '%.40s' is not \"gen step step_time_us wall_ms\"",
                           buf);
    unsigned long long g = v[0], st = v[2], w = v[3];
    hb->generation = g;
    hb->step = step;
    hb->step_time_us = st;
    hb->wall_ms = w;
    return 0;
}

int ftc_ctl_member_parse(const char *text, ftc_ctl_member_rec_t *m, ftc_err_t *err)
{
    memset(m, 0, sizeof *m);
    /* whole words and whole numbers: sscanf("%127s %63s %lld %23s") took a
     * longer host's rest for the domain, and "4x" as pid 4 with "x" for
     * JOINED_MS; %llu took "-5" as a join time of 2^64-5 */
    const char *p = text;
    char pid[24];
    int64_t v = 0;
    uint64_t j = 0;
    if (!ftc_next_word(&p, m->host, sizeof m->host) ||
        !ftc_next_word(&p, m->domain, sizeof m->domain) || !ftc_next_word(&p, pid, sizeof pid) ||
        !ftc_next_word(&p, m->joined, sizeof m->joined) ||
        ftc_parse_int(pid, INT64_MIN, INT64_MAX, &v)) {
        memset(m, 0, sizeof *m);
        return ftc_err_set(err, FTC_EPROTO, "member record '%.80s' is not \"host domain pid "
                           "joined_ms\"", text);
    }
    m->pid = v;
    m->joined_ok = ftc_parse_u64(m->joined, &j) == 0;
    m->joined_ms = m->joined_ok ? j : 0;
    return 0;
}

/* ---- generations --------------------------------------------------------------- */

int ftc_ctl_generation(ftc_ctl_t *c, uint64_t *gen, uint32_t *world)
{
    KEY(key, "gen");
    long long g = 0, w = 0;
    int got;
    int rc = ftc__hget_ints(c, key, "gen", "world", true, &g, &w, &got);
    if (got < 0)
        return rc;
    *gen = 0;
    *world = 0;
    if (got) {
        if (w > (1 << 24))
            rc = ftc_err_set(&c->err, FTC_EPROTO, "%s holds gen %lld world %lld (above 2^24)",
                             key, g, w);
        *gen = (uint64_t)g;
        *world = (uint32_t)w;
    }
    return rc;
}

int ftc_ctl_generation_bump(ftc_ctl_t *c, const char *holder, uint64_t epoch, uint64_t seen,
                            uint32_t world, const char *reason, uint64_t *out)
{
    KEY(leader, "leader");
    KEY(gen, "gen");
    KEY(events, "events");
    const char *keys[] = {leader, gen, events};
    char ep[24], sn[24], wd[16], now[24], cap[16];
    snprintf(ep, sizeof ep, "%" PRIu64, epoch);
    snprintf(sn, sizeof sn, "%" PRIu64, seen);
    snprintf(wd, sizeof wd, "%u", world);
    snprintf(now, sizeof now, "%" PRIu64, ftc_wall_ms());
    snprintf(cap, sizeof cap, "%d", FTC_CTL_EVENTS_CAP);
    const char *args[] = {holder, ep, sn, wd, reason ? reason : "", now, cap};
    long long g;
    int rc = ftc__eval_int(c, &c->s_gen_bump, "generation_bump", 3, keys, 7, args, &g);
    if (!rc)
        *out = (uint64_t)g;
    return rc;
}

int ftc_ctl_reseed(ftc_ctl_t *c, uint64_t gen, uint32_t world, int64_t committed_step)
{
    KEY(g, "gen");
    KEY(commit, "commit");
    const char *keys[] = {g, commit};
    char a[24], b[16], s[24];
    snprintf(a, sizeof a, "%" PRIu64, gen);
    snprintf(b, sizeof b, "%u", world);
    snprintf(s, sizeof s, "%" PRId64, committed_step);
    const char *args[] = {a, b, s};
    int rc = ftc_redis_eval(c->r, &c->s_reseed, 2, keys, 3, args, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

/* ---- leader lease ---------------------------------------------------------------- */

int ftc_ctl_lease_acquire(ftc_ctl_t *c, const char *holder, int ttl_ms, bool *held,
                          uint64_t *epoch)
{
    if (!ftc__valid_id(holder, 128) || strchr(holder, ' '))
        return ftc_err_set(&c->err, FTC_EINVAL, "lease holder '%.80s' is not a valid id", holder);
    KEY(leader, "leader");
    KEY(ep, "leader:epoch");
    const char *keys[] = {leader, ep};
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *args[] = {holder, ttl};
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_eval(c->r, &c->s_lease_acquire, 2, keys, 2, args, &rep);
    if (rc)
        return ftc__rc(c, rc);
    ftc_redis_reply_t **el;
    size_t n;
    rc = ftc_redis_want_array(rep, "lease_acquire", 3, &el, &n, &c->err);
    long long h = 0, e = 0;
    if (!rc)
        rc = ftc_redis_want_int(el[0], "lease_acquire held", &h, &c->err);
    if (!rc)
        rc = ftc_redis_want_int(el[1], "lease_acquire epoch", &e, &c->err);
    ftc_redis_reply_free(rep);
    if (!rc) {
        *held = h == 1;
        *epoch = (uint64_t)e;
    }
    return rc;
}

int ftc_ctl_lease_renew(ftc_ctl_t *c, const char *holder, uint64_t epoch, int ttl_ms, bool *held)
{
    KEY(leader, "leader");
    const char *keys[] = {leader};
    char ep[24], ttl[16];
    snprintf(ep, sizeof ep, "%" PRIu64, epoch);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *args[] = {holder, ep, ttl};
    long long v;
    int rc = ftc__eval_int(c, &c->s_lease_renew, "lease_renew", 1, keys, 3, args, &v);
    if (!rc)
        *held = v == 1;
    return rc;
}

int ftc_ctl_lease_release(ftc_ctl_t *c, const char *holder, uint64_t epoch)
{
    KEY(leader, "leader");
    const char *keys[] = {leader};
    char ep[24];
    snprintf(ep, sizeof ep, "%" PRIu64, epoch);
    const char *args[] = {holder, ep};
    int rc = ftc_redis_eval(c->r, &c->s_lease_release, 1, keys, 2, args, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_leader_parse(const char *s, size_t len, const char *key, char *holder, size_t cap,
                         uint64_t *epoch, ftc_err_t *err)
{
    char buf[200], h[160], ew[24];
    uint64_t e = 0;
    snprintf(buf, sizeof buf, "%.*s", (int)(len < 199 ? len : 199), s);
    const char *p = buf;
    /* whole words, the epoch all digits (sscanf's %llu took "-1" as 2^64-1) */
    if (!ftc_next_word(&p, h, sizeof h) || !ftc_next_word(&p, ew, sizeof ew) ||
        ftc_parse_u64(ew, &e))
        return ftc_err_set(err, FTC_EPROTO, "%s holds '%.40s' (expected \"holder epoch\")", key,
                           buf);
    snprintf(holder, cap, "%s", h);
    *epoch = e;
    return 0;
}

int ftc_ctl_leader(ftc_ctl_t *c, char *holder, size_t cap, uint64_t *epoch, int64_t *ttl_ms)
{
    KEY(leader, "leader");
    holder[0] = '\0';
    *epoch = 0;
    *ttl_ms = -2;
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "GET", leader, NULL);
    if (rc)
        return ftc__rc(c, rc);
    const char *s;
    size_t len;
    rc = ftc_redis_want_str(rep, leader, &s, &len, &c->err);
    if (rc == FTC_ENOENT) {
        ftc_redis_reply_free(rep);
        return 0;
    }
    if (!rc)
        rc = ftc_ctl_leader_parse(s, len, leader, holder, cap, epoch, &c->err);
    ftc_redis_reply_free(rep);
    if (rc)
        return rc;
    rc = ftc_redis_cmdv(c->r, true, &rep, "PTTL", leader, NULL);
    if (rc)
        return ftc__rc(c, rc);
    long long t;
    rc = ftc_redis_want_int(rep, "PTTL leader", &t, &c->err);
    ftc_redis_reply_free(rep);
    if (!rc)
        *ttl_ms = t;
    return rc;
}

/* ---- events and failure reports ---------------------------------------------- */

/* Builds the field/value list of an event into argv (14 entries). */
static void ftc__event_fields(const ftc_ctl_event_t *e, const char **argv, char num[5][24])
{
    snprintf(num[0], 24, "%d", e->rank);
    snprintf(num[1], 24, "%" PRIu64, e->generation);
    snprintf(num[2], 24, "%" PRId64, e->step);
    snprintf(num[3], 24, "%" PRIu64, e->t_fault_ms);
    snprintf(num[4], 24, "%" PRIu64, e->t_detect_ms ? e->t_detect_ms : ftc_wall_ms());
    const char *f[] = {"kind", e->kind ? e->kind : "?", "node", e->node ? e->node : "",
                       "rank", num[0], "gen", num[1], "step", num[2],
                       "detail", e->detail ? e->detail : "", "t_fault_ms", num[3]};
    for (int i = 0; i < 14; i++)
        argv[i] = f[i];
    argv[14] = "t_detect_ms";
    argv[15] = num[4];
}

int ftc_ctl_event(ftc_ctl_t *c, const ftc_ctl_event_t *e)
{
    KEY(events, "events");
    char num[5][24], cap[16];
    const char *argv[6 + 16];
    snprintf(cap, sizeof cap, "%d", FTC_CTL_EVENTS_CAP);
    argv[0] = "XADD", argv[1] = events, argv[2] = "MAXLEN", argv[3] = "~", argv[4] = cap;
    argv[5] = "*";
    ftc__event_fields(e, argv + 6, num);
    /* not idempotent: a retried XADD could log the event twice */
    int rc = ftc_redis_cmd(c->r, false, NULL, 22, argv, NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

/* The exactly-once report into dedupe hash `reports` (ttl_ms 0: no expiry). */
static int ftc__report(ftc_ctl_t *c, const char *reports, const char *ttl_ms, const char *id,
                       const ftc_ctl_event_t *e, bool *first)
{
    KEY(events, "events");
    const char *keys[] = {reports, events};
    char num[5][24], now[24], cap[16];
    const char *args[4 + 16];
    snprintf(now, sizeof now, "%" PRIu64, ftc_wall_ms());
    snprintf(cap, sizeof cap, "%d", FTC_CTL_EVENTS_CAP);
    args[0] = id, args[1] = now, args[2] = cap, args[3] = ttl_ms;
    ftc__event_fields(e, args + 4, num);
    long long v;
    int rc = ftc__eval_int(c, &c->s_report, "report", 2, keys, 20, args, &v);
    if (!rc && first)
        *first = v == 1;
    return rc;
}

int ftc_ctl_report(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first)
{
    KEY(reports, "failures:%" PRIu64, e->generation);
    return ftc__report(c, reports, "86400000", id, e, first);
}

int ftc_ctl_report_job(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first)
{
    KEY(reports, "failures:job");
    return ftc__report(c, reports, "0", id, e, first);
}

int ftc_ctl_event_once(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first)
{
    KEY(ids, "published");
    return ftc__report(c, ids, "3600000", id, e, first);
}

/* ---- commit records --------------------------------------------------------------- */

int ftc_ctl_commit_report(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                          uint64_t checksum, int64_t *committed, bool *now_committed)
{
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "commit_report: step %" PRId64 " < 0", step);
    KEY(g, "gen");
    KEY(reports, "commit:%" PRIu64 ":%" PRId64, gen, step);
    KEY(commit, "commit");
    KEY(events, "events");
    KEY(steps, "committed");
    const char *keys[] = {g, reports, commit, events, steps};
    char a[24], s[24], r[16], ck[24], now[24], cap[16], scap[16];
    snprintf(a, sizeof a, "%" PRIu64, gen);
    snprintf(s, sizeof s, "%" PRId64, step);
    snprintf(r, sizeof r, "%u", rank);
    snprintf(ck, sizeof ck, "%016" PRIx64, checksum);
    snprintf(now, sizeof now, "%" PRIu64, ftc_wall_ms());
    snprintf(cap, sizeof cap, "%d", FTC_CTL_EVENTS_CAP);
    snprintf(scap, sizeof scap, "%d", FTC_CTL_COMMITTED_CAP);
    const char *args[] = {a, s, r, ck, now, cap, scap};
    long long state = 0, val = 0;
    int rc = ftc__eval_pair(c, &c->s_commit, "commit_report", 5, keys, 7, args, &state, &val);
    if (rc)
        return rc;
    if (now_committed)
        *now_committed = state == 1;
    if (committed) {
        if (state == 0)
            return ftc_ctl_committed(c, committed, &gen);
        *committed = val;
    }
    return 0;
}

int ftc_ctl_committed(ftc_ctl_t *c, int64_t *step, uint64_t *gen)
{
    KEY(commit, "commit");
    long long s = -1, g = 0; /* gen stays 0 when the record has none */
    int got;
    int rc = ftc__hget_ints(c, commit, "step", "gen", false, &s, &g, &got);
    if (got < 0)
        return rc;
    *step = got ? s : -1;
    *gen = got ? (uint64_t)g : 0;
    return rc;
}

bool ftc_ctl_committed_member_parse(const char *v, size_t len, int64_t *step, uint64_t *gen)
{
    char buf[48], *end = NULL;
    long long s = -1;
    unsigned long long g = 0;
    bool ok = len > 0 && len < sizeof buf;
    if (ok) {
        memcpy(buf, v, len);
        buf[len] = 0;
        errno = 0;
        s = strtoll(buf, &end, 10);
        ok = errno == 0 && end != buf && *end == ':' && s >= 0 && end[1] >= '0' && end[1] <= '9';
        if (ok) {
            const char *gs = end + 1;
            g = strtoull(gs, &end, 10);
            ok = errno == 0 && *end == 0;
        }
    }
    if (ok) {
        *step = s;
        *gen = g;
    }
    return ok;
}

/* One member of the committed set: "STEP:GEN". */
static int ftc__committed_member(ftc_ctl_t *c, const ftc_redis_reply_t *e, const char *key,
                                 int64_t *step, uint64_t *gen)
{
    const char *v = NULL;
    size_t len = 0;
    int rc = ftc_redis_want_str(e, key, &v, &len, &c->err);
    if (rc)
        return rc;
    if (!ftc_ctl_committed_member_parse(v, len, step, gen))
        return ftc_err_set(&c->err, FTC_EPROTO, "%s: member '%.*s' is not STEP:GEN", key,
                           (int)(len > 40 ? 40 : len), v);
    return 0;
}

int ftc_ctl_committed_at_most(ftc_ctl_t *c, int64_t max_step, int cap, int64_t *steps,
                              uint64_t *gens, int *n, int64_t *oldest)
{
    *n = 0;
    if (oldest)
        *oldest = -1;
    if (max_step < 0 || cap < 1)
        return ftc_err_set(&c->err, FTC_EINVAL, "committed_at_most: step %" PRId64 ", cap %d",
                           max_step, cap);
    KEY(key, "committed");
    char mx[24], lim[16];
    snprintf(mx, sizeof mx, "%" PRId64, max_step);
    snprintf(lim, sizeof lim, "%d", cap);
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "ZREVRANGEBYSCORE", key, mx, "-inf", "LIMIT", "0",
                            lim, NULL);
    if (rc)
        return ftc__rc(c, rc);
    ftc_redis_reply_t **el;
    size_t ne = 0;
    rc = ftc_redis_want_array(rep, key, -1, &el, &ne, &c->err);
    for (size_t i = 0; !rc && i < ne && *n < cap; i++) {
        int64_t s = -1;
        uint64_t g = 0;
        rc = ftc__committed_member(c, el[i], key, &s, &g);
        if (!rc && s <= max_step)
            steps[*n] = s, gens[(*n)++] = g;
    }
    ftc_redis_reply_free(rep);
    if (rc || !oldest)
        return rc;
    if ((rc = ftc_redis_cmdv(c->r, true, &rep, "ZRANGE", key, "0", "0", NULL)) != 0)
        return ftc__rc(c, rc);
    rc = ftc_redis_want_array(rep, key, -1, &el, &ne, &c->err);
    if (!rc && ne > 0) {
        int64_t s = -1;
        uint64_t g = 0;
        if ((rc = ftc__committed_member(c, el[0], key, &s, &g)) == 0)
            *oldest = s;
    }
    ftc_redis_reply_free(rep);
    return rc;
}

static int ftc__hex_nibble(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int ftc_ctl_commit_withdraw(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                            int64_t *committed, bool *withdrawn)
{
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "commit_withdraw: step %" PRId64 " < 0", step);
    KEY(reports, "commit:%" PRIu64 ":%" PRId64, gen, step);
    KEY(commit, "commit");
    const char *keys[] = {reports, commit};
    char s[24], r[16];
    snprintf(s, sizeof s, "%" PRId64, step);
    snprintf(r, sizeof r, "%u", rank);
    const char *args[] = {s, r};
    long long state = 0, val = -1;
    int rc = ftc__eval_pair(c, &c->s_withdraw, "commit_withdraw", 2, keys, 2, args, &state, &val);
    if (rc)
        return rc;
    if (committed)
        *committed = val;
    if (withdrawn)
        *withdrawn = state == 1;
    return 0;
}

int ftc_ctl_commit_abort(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                         const char *why, int64_t *committed, bool *marked)
{
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "commit_abort: step %" PRId64 " < 0", step);
    KEY(reports, "commit:%" PRIu64 ":%" PRId64, gen, step);
    KEY(commit, "commit");
    const char *keys[] = {reports, commit};
    char s[24], r[16], w[FTC_CTL_ABORT_WHY_MAX + 1];
    snprintf(s, sizeof s, "%" PRId64, step);
    snprintf(r, sizeof r, "%u", rank);
    snprintf(w, sizeof w, "%s", why ? why : "");
    const char *args[] = {s, r, w};
    long long state = 0, val = -1;
    int rc = ftc__eval_pair(c, &c->s_abort, "commit_abort", 2, keys, 3, args, &state, &val);
    if (rc)
        return rc;
    if (committed)
        *committed = val;
    if (marked)
        *marked = state == 1;
    return 0;
}

bool ftc_ctl_abort_marker_parse(const char *v, size_t len, uint32_t *rank, char *why, size_t cap)
{
    unsigned long r = 0;
    size_t i = 0;
    for (; i < len && i < 10 && v[i] >= '0' && v[i] <= '9'; i++)
        r = r * 10 + (unsigned long)(v[i] - '0');
    if (i == 0 || r > UINT32_MAX || (i < len && v[i] != ' '))
        return false;
    *rank = (uint32_t)r;
    if (why && cap && i < len)
        snprintf(why, cap, "%.*s", (int)(len - i - 1), v + i + 1);
    return true;
}

int ftc_ctl_commit_aborted(ftc_ctl_t *c, uint64_t gen, int64_t step, bool *aborted,
                           uint32_t *rank, char *why, size_t cap)
{
    *aborted = false;
    if (why && cap)
        why[0] = 0;
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "commit_aborted: step %" PRId64 " < 0", step);
    KEY(reports, "commit:%" PRIu64 ":%" PRId64, gen, step);
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "HGET", reports, "abort", NULL);
    if (rc)
        return ftc__rc(c, rc);
    if (rep->type == REDIS_REPLY_NIL) {
        ftc_redis_reply_free(rep);
        return 0;
    }
    const char *v = NULL;
    size_t len = 0;
    rc = ftc_redis_want_str(rep, reports, &v, &len, &c->err);
    uint32_t r = 0;
    if (!rc && !ftc_ctl_abort_marker_parse(v, len, &r, why, cap))
        rc = ftc_err_set(&c->err, FTC_EPROTO, "%s field abort: '%.*s' is not \"RANK why\"",
                         reports, (int)(len > 40 ? 40 : len), v);
    if (!rc) {
        *aborted = true;
        if (rank)
            *rank = r;
    }
    ftc_redis_reply_free(rep);
    return rc;
}

bool ftc_ctl_checksum_parse(const char *v, size_t len, uint64_t *checksum)
{
    uint64_t x = 0;
    if (len == 0 || len > 16)
        return false;
    for (size_t i = 0; i < len; i++) {
        int d = ftc__hex_nibble(v[i]);
        if (d < 0)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *checksum = x;
    return true;
}

int ftc_ctl_commit_checksum(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                            uint64_t *checksum, bool *found)
{
    *found = false;
    *checksum = 0;
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "commit_checksum: step %" PRId64 " < 0", step);
    KEY(reports, "commit:%" PRIu64 ":%" PRId64, gen, step);
    char r[16];
    snprintf(r, sizeof r, "%u", rank);
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "HGET", reports, r, NULL);
    if (rc)
        return ftc__rc(c, rc);
    if (rep->type == REDIS_REPLY_NIL) {
        ftc_redis_reply_free(rep);
        return 0;
    }
    const char *v = NULL;
    size_t len = 0;
    rc = ftc_redis_want_str(rep, reports, &v, &len, &c->err);
    uint64_t x = 0;
    if (!rc && !len)
        rc = ftc_err_set(&c->err, FTC_EPROTO, "%s field %s: empty checksum", reports, r);
    else if (!rc && !ftc_ctl_checksum_parse(v, len, &x))
        rc = ftc_err_set(&c->err, FTC_EPROTO, "%s field %s: checksum '%.*s' is not hex",
                         reports, r, (int)(len > 32 ? 32 : len), v);
    ftc_redis_reply_free(rep);
    if (rc)
        return rc;
    *checksum = x;
    *found = true;
    return 0;
}

int ftc_ctl_job_secret(ftc_ctl_t *c, uint8_t out[16], ftc_err_t *err)
{
    uint8_t rnd[16];
    char hex[33], key[160];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return ftc_err_errno(err, errno, "getrandom");
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    ftc_ctl_key(c, "secret", key, sizeof key);
    ftc_redis_t *r = ftc_ctl_redis(c);
    int rc = ftc_redis_cmdv(r, true, NULL, "SET", key, hex, "NX", NULL);
    ftc_redis_reply_t *rep = NULL;
    if (!rc)
        rc = ftc_redis_cmdv(r, true, &rep, "GET", key, NULL);
    const char *s;
    size_t sl;
    if (rc || ftc_redis_want_str(rep, key, &s, &sl, err) || sl != 32) {
        ftc_redis_reply_free(rep);
        return ftc_err_set(err, FTC_EREDIS, "job secret in %s: %s", key,
                           rc ? ftc_ctl_errstr(c) : "not 32 hex digits");
    }
    for (int i = 0; i < 16; i++) {
        int hi = ftc__hex_nibble(s[2 * i]), lo = ftc__hex_nibble(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            ftc_redis_reply_free(rep);
            return ftc_err_set(err, FTC_EPROTO, "job secret in %s is not hex", key);
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    ftc_redis_reply_free(rep);
    return 0;
}

/* ---- the job links libftc ----------------------------------------------------------- */

int ftc_ctl_linked_set(ftc_ctl_t *c)
{
    KEY(key, "linked");
    int rc = ftc_redis_cmdv(c->r, true, NULL, "SET", key, "1", NULL);
    return rc ? ftc__rc(c, rc) : 0;
}

int ftc_ctl_linked(ftc_ctl_t *c, bool *linked)
{
    KEY(key, "linked");
    ftc_redis_reply_t *rep = NULL;
    *linked = false;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "GET", key, NULL);
    if (rc)
        return ftc__rc(c, rc);
    const char *v;
    size_t len;
    rc = ftc_redis_want_str(rep, key, &v, &len, &c->err);
    if (rc == FTC_ENOENT) {
        rc = 0;
    } else if (rc == 0 && len == 1 && v[0] == '1') {
        *linked = true;
    } else if (rc == 0) {
        rc = ftc_err_set(&c->err, FTC_EPROTO, "%s holds '%.*s', not 1 (delete it)", key,
                         (int)(len > 40 ? 40 : len), v);
    }
    ftc_redis_reply_free(rep);
    return rc;
}

/* ---- removing a job's state ------------------------------------------------------------ */

int ftc_ctl_glob_escape(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap == 0)
        return -1;
    for (; *s; s++) {
        size_t special = strchr("*?[]\\", *s) ? 1 : 0;
        if (o + special + 2 > cap) { /* the character, its escape and the NUL */
            buf[0] = '\0';
            return -1;
        }
        if (special)
            buf[o++] = '\\';
        buf[o++] = *s;
    }
    buf[o] = '\0';
    return (int)o;
}

#define FTC__CLEAN_NAMED 8 /* nodes named per kind in ftc_ctl_clean_t.live */
#define FTC__CLEAN_LIST (FTC__CLEAN_NAMED * (FTC_CTL_NODE_MAX + 2))

typedef struct ftc__clean_state {
    ftc_ctl_clean_t *out;
    size_t plen;                       /* strlen of the job's prefix */
    char hb[FTC__CLEAN_LIST];          /* "A, B" */
    char sup[FTC__CLEAN_LIST];
    bool use_del;                      /* the server has no UNLINK */
} ftc__clean_state_t;

/* Called with each page of a scan: its n keys (strings). */
typedef int (*ftc__page_fn)(ftc_ctl_t *c, ftc_redis_reply_t **keys, size_t n,
                            ftc__clean_state_t *st);

/* Walks the job's keys: SCAN MATCH (the prefix, its job id glob-escaped, then
 * "*") COUNT 1000 from cursor 0 until the server gives 0 back, each page to
 * fn. A key may come twice (SCAN's promise: every key there throughout comes
 * at least once). */
static int ftc__scan_job(ftc_ctl_t *c, ftc__page_fn fn, ftc__clean_state_t *st)
{
    char esc[2 * sizeof c->job], pat[sizeof esc + 16], cursor[32] = "0";
    if (ftc_ctl_glob_escape(c->job, esc, sizeof esc) < 0) /* 63 characters fit, escaped */
        return ftc_err_set(&c->err, FTC_EINVAL, "job id '%s' is too long to scan", c->job);
    snprintf(pat, sizeof pat, "ftc:{%s}:*", esc);
    do {
        ftc_redis_reply_t *rep, **el, **keys;
        size_t n, nk = 0, cl = 0;
        const char *cur;
        int rc = ftc_redis_cmdv(c->r, true, &rep, "SCAN", cursor, "MATCH", pat, "COUNT", "1000",
                                NULL);
        if (rc)
            return ftc__rc(c, rc);
        rc = ftc_redis_want_array(rep, "SCAN", 2, &el, &n, &c->err);
        if (!rc)
            rc = ftc_redis_want_str(el[0], "SCAN cursor", &cur, &cl, &c->err);
        if (!rc && (cl == 0 || cl >= sizeof cursor))
            rc = ftc_err_set(&c->err, FTC_EPROTO, "SCAN: a cursor of %zu bytes", cl);
        if (!rc)
            rc = ftc_redis_want_array(el[1], "SCAN keys", -1, &keys, &nk, &c->err);
        for (size_t i = 0; !rc && i < nk; i++)
            if (keys[i]->type != REDIS_REPLY_STRING || keys[i]->len < st->plen)
                rc = ftc_err_set(&c->err, FTC_EPROTO, "SCAN %s: key %zu is no key of the job",
                                 pat, i);
        if (!rc) {
            memcpy(cursor, cur, cl);
            cursor[cl] = '\0';
            if (nk)
                rc = fn(c, keys, nk, st);
        }
        ftc_redis_reply_free(rep);
        if (rc)
            return rc;
    } while (strcmp(cursor, "0"));
    return 0;
}

/* Adds name (len bytes; anything but a printable character shown as '?') to
 * the list, unless FTC__CLEAN_NAMED are named already (*count counts all). */
static void ftc__clean_name(char *list, int *count, const char *name, size_t len)
{
    if ((*count)++ >= FTC__CLEAN_NAMED)
        return;
    size_t o = strlen(list);
    if (o)
        o += (size_t)snprintf(list + o, FTC__CLEAN_LIST - o, ", ");
    for (size_t i = 0; i < len && i < FTC_CTL_NODE_MAX && o + 1 < FTC__CLEAN_LIST; i++)
        list[o++] = isgraph((unsigned char)name[i]) ? name[i] : '?';
    list[o] = '\0';
}

/* A page of the look before: heartbeat keys and supervisor leases. */
static int ftc__clean_look(ftc_ctl_t *c, ftc_redis_reply_t **keys, size_t n,
                           ftc__clean_state_t *st)
{
    (void)c;
    for (size_t i = 0; i < n; i++) {
        const char *k = keys[i]->str + st->plen;
        size_t len = keys[i]->len - st->plen;
        if (len > 3 && !memcmp(k, "hb:", 3))
            ftc__clean_name(st->hb, &st->out->n_hb, k + 3, len - 3);
        else if (len > 4 && !memcmp(k, "sup:", 4))
            ftc__clean_name(st->sup, &st->out->n_sup, k + 4, len - 4);
    }
    return 0;
}

/* A page of the removal: one UNLINK (DEL once a server had none) of its keys. */
static int ftc__clean_remove(ftc_ctl_t *c, ftc_redis_reply_t **keys, size_t n,
                             ftc__clean_state_t *st)
{
    const char **argv = malloc((n + 1) * sizeof *argv);
    size_t *lens = malloc((n + 1) * sizeof *lens);
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return ftc_err_set(&c->err, FTC_ENOMEM, "clean: out of memory for %zu keys", n);
    }
    for (size_t i = 0; i < n; i++) {
        argv[i + 1] = keys[i]->str;
        lens[i + 1] = keys[i]->len;
    }
    ftc_redis_reply_t *rep = NULL;
    int rc = FTC_EREDIS;
    for (int attempt = 0; attempt < 2 && rc; attempt++) {
        argv[0] = st->use_del ? "DEL" : "UNLINK";
        lens[0] = strlen(argv[0]);
        rc = ftc_redis_cmd(c->r, true, &rep, (int)n + 1, argv, lens);
        if (rc && !st->use_del && ftc_redis_is_up(c->r) &&
            strstr(ftc_redis_errstr(c->r), "unknown command"))
            st->use_del = true; /* a server older than Redis 4 */
        else
            break;
    }
    free(argv);
    free(lens);
    if (rc)
        return ftc__rc(c, rc);
    long long removed;
    rc = ftc_redis_want_int(rep, st->use_del ? "DEL" : "UNLINK", &removed, &c->err);
    ftc_redis_reply_free(rep);
    if (!rc && removed > 0)
        st->out->removed += (uint64_t)removed;
    return rc;
}

/* The leader lease: appends "leader lease held by H" to out->live when held. */
static int ftc__clean_leader(ftc_ctl_t *c, ftc_ctl_clean_t *out)
{
    KEY(leader, "leader");
    ftc_redis_reply_t *rep;
    int rc = ftc_redis_cmdv(c->r, true, &rep, "GET", leader, NULL);
    if (rc)
        return ftc__rc(c, rc);
    const char *v;
    size_t len;
    ftc_err_t ignored = {0};
    rc = ftc_redis_want_str(rep, leader, &v, &len, &c->err);
    if (rc == FTC_ENOENT) {
        ftc_redis_reply_free(rep);
        return 0;
    }
    if (!rc) {
        char holder[FTC_CTL_NODE_MAX + 64] = "", shown[FTC_CTL_NODE_MAX + 64] = "";
        uint64_t epoch;
        if (ftc_ctl_leader_parse(v, len, leader, holder, sizeof holder, &epoch, &ignored))
            ftc__clean_name(shown, &(int){0}, v, len); /* garbage: shown as it is */
        else
            snprintf(shown, sizeof shown, "%s", holder);
        out->leader = true;
        size_t o = strlen(out->live);
        snprintf(out->live + o, sizeof out->live - o, "%sleader lease held by %s",
                 o ? "; " : "", shown);
    }
    ftc_redis_reply_free(rep);
    return rc;
}

/* "heartbeat of A" / "heartbeats of A, B and 3 more" into out->live. */
static void ftc__clean_list(ftc_ctl_clean_t *out, const char *what, const char *list, int count)
{
    if (!count)
        return;
    size_t o = strlen(out->live);
    char more[32] = "";
    if (count > FTC__CLEAN_NAMED)
        snprintf(more, sizeof more, " and %d more", count - FTC__CLEAN_NAMED);
    snprintf(out->live + o, sizeof out->live - o, "%s%s%s of %s%s", o ? "; " : "", what,
             count > 1 ? "s" : "", list, more);
}

int ftc_ctl_clean(ftc_ctl_t *c, bool force, ftc_ctl_clean_t *out)
{
    ftc_ctl_clean_t local;
    if (!out)
        out = &local;
    memset(out, 0, sizeof *out);
    ftc__clean_state_t st = {.out = out, .plen = strlen(c->prefix)};
    int rc;
    if (!force) {
        if ((rc = ftc__scan_job(c, ftc__clean_look, &st)) != 0)
            return rc;
        ftc__clean_list(out, "heartbeat", st.hb, out->n_hb);
        ftc__clean_list(out, "supervisor lease", st.sup, out->n_sup);
        if ((rc = ftc__clean_leader(c, out)) != 0)
            return rc;
        if (out->live[0])
            return ftc_err_set(&c->err, FTC_EINPROGRESS, "job %s looks alive: %s", c->job,
                               out->live);
    }
    return ftc__scan_job(c, ftc__clean_remove, &st);
}
