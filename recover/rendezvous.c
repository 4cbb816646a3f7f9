/*
 * rendezvous.c — see rendezvous.h. The Lua scripts are the protocol; the C
 * side validates input, builds key names, polls with a deadline and an abort
 * flag, and parses replies defensively (a key holding garbage is an error
 * naming it, never a crash). Script refusals start with a reason word
 * (FTC_STALE, FTC_CORRUPT, FTC_CONFLICT), mapped to FTC_E* codes.
 */
#include "recover/rendezvous.h"

#include "core/log.h"

#include <ctype.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the generation (KEYS[1] field gen) into g: absent is 0; anything but a decimal
 * integer below 2^53 (exact in a Lua number; detect/control.c reads gen the same way, in its
 * scripts, FTC__LUA_INT, and in C, ftc__field_int)
 * is FTC_CORRUPT - Lua's tonumber alone took "1.5", "0x1", "1e0", " 1" or "-1", and the
 * scripts then saw another generation than the C readers (or none they could join). */
#define LUA_READ_GEN                                                                           \
    "local raw = redis.call('HGET', KEYS[1], 'gen')\n"                                          \
    "local g = 0\n"                                                                             \
    "if raw then\n"                                                                             \
    "  g = string.match(raw, '^%d+$') and tonumber(raw)\n"                                      \
    "  if not g or g > 9007199254740991 then return redis.error_reply('FTC_CORRUPT ' .. "       \
    "KEYS[1] .. ' field gen holds \"' .. string.sub(raw, 1, 40) .. '\" (not a decimal integer "  \
    "below 2^53)') end\n"                                                                       \
    "end\n"

/* KEYS: gen, rdzv, reg, alive, out, roster, events, seen (every node that registered).
 * ARGV: node, after, min, max (0 = none), settle_ms, ttl_ms, events cap, mode (join|leave),
 * was_open (1 = the caller's last poll found the round open), heartbeat key prefix
 * (ftc:{J}:hb:, detect/control.h: a survivor's agent keeps ftc:{J}:hb:NODE),
 * survivor_wait_ms.
 * Returns {0, registered, open, settled_ms} while waiting (or after a leave),
 * {2, gen, members, spares, prev} once the round after `after` closed, while its generation
 * is current (in either mode: a leave that comes too late learns the round it is in); past
 * it, FTC_STALE. */
static const char lua_join[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    LUA_READ_GEN
    "local after, node = tonumber(ARGV[2]), ARGV[1]\n"
    /* Redis lost the job's state (restart without persistence, FLUSHALL): the
     * caller was in generation `after`, so it exists; put it back (never
     * lowers), and the round's open flag when the caller saw it open */
    "if g < after and ARGV[8] ~= 'leave' then\n"
    "  redis.call('HSET', KEYS[1], 'gen', after, 'world', 0, 'at_ms', now, 'by', 'reseed')\n"
    "  local r0 = redis.call('HGET', KEYS[2], 'round')\n"
    "  if ARGV[9] == '1' and tonumber(r0 or '-1') ~= after then\n"
    "    redis.call('HSET', KEYS[2], 'round', after, 'open', 1, 'opened_ms', now, 'last_ms', 0, "
    "'seq', 0, 'reason', 'reopened: redis lost its data')\n"
    "  end\n"
    "  g = after\n"
    "end\n"
    "if g ~= after then\n"
    "  local o = redis.call('HMGET', KEYS[5], 'gen', 'members', 'spares', 'prev')\n"
    /* the round's result only while its generation is current: a node that
     * was in it but missed the close must not start work in a generation the
     * others already left (it was returned however far the job had moved) */
    "  if o[1] and o[2] and tonumber(o[1]) == g then return {2, g, o[2], o[3] or '', "
    "tonumber(o[4] or '0') or 0} end\n"
    "  return redis.error_reply('FTC_STALE generation is ' .. g .. ', not ' .. after .. "
    "': the round after ' .. after .. ' is gone; join the round after ' .. g)\n"
    "end\n"
    "if ARGV[8] == 'leave' then\n"
    "  redis.call('HDEL', KEYS[3], node) redis.call('ZREM', KEYS[4], node)\n"
    "  return {0, 0, 0, 0}\n"
    "end\n"
    "local st = redis.call('HMGET', KEYS[2], 'round', 'open', 'opened_ms', 'last_ms', 'seq', "
    "'reason')\n"
    "local open, opened, last, seq, reason = 0, 0, 0, 0, ''\n"
    "if tonumber(st[1] or '-1') == after then\n"
    "  open = tonumber(st[2] or '0') or 0 opened = tonumber(st[3] or '0') or 0\n"
    "  last = tonumber(st[4] or '0') or 0 seq = tonumber(st[5] or '0') or 0 reason = st[6] or ''\n"
    "else\n"
    "  redis.call('HSET', KEYS[2], 'round', after, 'open', 0, 'opened_ms', 0, 'last_ms', 0, "
    "'seq', 0, 'reason', '')\n"
    "end\n"
    "if after == 0 then open = 1 end\n"
    "local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)\n"
    "for _, d in ipairs(dead) do redis.call('HDEL', KEYS[3], d) redis.call('ZREM', KEYS[4], d) "
    "end\n"
    /* a node registered before (it withdrew when its deadline passed, or its
     * entry expired) keeps its arrival number and is not a new arrival: a
     * spare that joins again every 2 s restarted the settle time each time */
    "if redis.call('HEXISTS', KEYS[3], node) == 0 then\n"
    "  local s0 = tonumber(redis.call('HGET', KEYS[8], node) or '')\n"
    "  if s0 then redis.call('HSET', KEYS[3], node, s0)\n"
    "  else\n"
    "    seq = seq + 1 last = now\n"
    "    redis.call('HSET', KEYS[3], node, seq)\n"
    "    redis.call('HSET', KEYS[8], node, seq)\n"
    "    redis.call('PEXPIRE', KEYS[8], 86400000)\n"
    "    redis.call('HSET', KEYS[2], 'seq', seq, 'last_ms', now)\n"
    "  end\n"
    "  redis.call('PEXPIRE', KEYS[3], 86400000)\n"
    "end\n"
    "redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), node)\n"
    "redis.call('PEXPIRE', KEYS[4], 86400000)\n"
    "local n = redis.call('HLEN', KEYS[3])\n"
    "local max = tonumber(ARGV[4])\n"
    "local from = last\n"
    "if opened > from then from = opened end\n"
    "if open ~= 1 then return {0, n, 0, 0} end\n"
    /* Neither rule closes the round while a survivor is missing, a member of
     * generation `after` not registered yet whose heartbeat (ARGV[10] ..
     * node, the agent's key, same hash slot) is there — it holds shards and
     * is stopping its ranks to register — until ARGV[11] ms after the round
     * opened: MAX registrants would give its place to a spare or newcomer,
     * and the settle time (shorter than a survivor's stop) closed a grow
     * round with the newcomer alone. A survivor whose heartbeat is gone is
     * lost and holds nothing. */
    "if now - opened < tonumber(ARGV[11]) then\n"
    "  local ro = redis.call('HMGET', KEYS[6], 'gen', 'members')\n"
    "  if ro[1] and ro[2] and tonumber(ro[1]) == after then\n"
    "    local preg, missing = 0, false\n"
    "    for m in string.gmatch(ro[2], '%S+') do\n"
    "      if redis.call('HEXISTS', KEYS[3], m) == 1 then preg = preg + 1\n"
    "      elseif redis.call('EXISTS', ARGV[10] .. m) == 1 then missing = true end\n"
    "    end\n"
    "    if missing and (max == 0 or preg < max) then return {0, n, 1, now - from} end\n"
    "  end\n"
    "end\n"
    "if not ((max > 0 and n >= max) or (n >= tonumber(ARGV[3]) and now - from >= "
    "tonumber(ARGV[5]))) then return {0, n, 1, now - from} end\n"
    "local reg = redis.call('HGETALL', KEYS[3])\n"
    "local seqof = {}\n"
    "for i = 1, #reg, 2 do seqof[reg[i]] = tonumber(reg[i + 1]) or 0 end\n"
    "local order, taken, prev = {}, {}, 0\n"
    "local ro = redis.call('HMGET', KEYS[6], 'gen', 'members')\n"
    "if ro[1] and ro[2] and tonumber(ro[1]) == after then\n"
    "  for m in string.gmatch(ro[2], '%S+') do\n"
    "    if seqof[m] and not taken[m] then order[#order + 1] = m taken[m] = true prev = prev + 1 "
    "end\n"
    "  end\n"
    "end\n"
    "local rest = {}\n"
    "for m, _ in pairs(seqof) do if not taken[m] then rest[#rest + 1] = m end end\n"
    "table.sort(rest, function(a, b) if seqof[a] ~= seqof[b] then return seqof[a] < seqof[b] end "
    "return a < b end)\n"
    "for _, m in ipairs(rest) do order[#order + 1] = m end\n"
    "local cnt = #order\n"
    "if max > 0 and cnt > max then cnt = max end\n"
    "if prev > cnt then prev = cnt end\n"
    "local mem, spa = {}, {}\n"
    "for i = 1, #order do if i <= cnt then mem[#mem + 1] = order[i] else spa[#spa + 1] = order[i] "
    "end end\n"
    "local ms, ss, g2 = table.concat(mem, ' '), table.concat(spa, ' '), after + 1\n"
    "redis.call('HSET', KEYS[1], 'gen', g2, 'world', 0, 'nodes', cnt, 'at_ms', now, 'by', "
    "'rendezvous')\n"
    "redis.call('HSET', KEYS[5], 'gen', g2, 'members', ms, 'spares', ss, 'prev', prev, 'at_ms', "
    "now)\n"
    "redis.call('PEXPIRE', KEYS[5], 86400000)\n"
    "redis.call('HSET', KEYS[6], 'gen', g2, 'members', ms)\n"
    "redis.call('HSET', KEYS[2], 'round', g2, 'open', 0, 'opened_ms', 0, 'last_ms', 0, 'seq', 0, "
    "'reason', '')\n"
    "redis.call('DEL', KEYS[3], KEYS[4], KEYS[8])\n"
    "local why = ''\n"
    "if reason ~= '' then why = ' (' .. reason .. ')' end\n"
    "redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[7], '*', 'kind', 'generation', 'node', node, "
    "'rank', '-1', 'gen', g2, 'step', '-1', 'detail', 'rendezvous closed: ' .. cnt .. ' members, ' "
    ".. #spa .. ' spares' .. why, 't_fault_ms', '0', 't_detect_ms', now)\n"
    "return {2, g2, ms, ss, prev}\n";

/* KEYS: gen, rdzv, events. ARGV: seen, reason, events cap. Returns 1 = opened, 0 = already.
 * A generation below seen is Redis having lost its data: seen is put back. */
static const char lua_request[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    LUA_READ_GEN
    "if g < tonumber(ARGV[1]) then\n"
    "  g = tonumber(ARGV[1])\n"
    "  redis.call('HSET', KEYS[1], 'gen', g, 'world', 0, 'at_ms', now, 'by', 'reseed')\n"
    "end\n"
    "if g ~= tonumber(ARGV[1]) then return redis.error_reply('FTC_STALE generation is ' .. g .. "
    "', not ' .. ARGV[1]) end\n"
    "if g == 0 then return 0 end\n"
    "local st = redis.call('HMGET', KEYS[2], 'round', 'open')\n"
    "if tonumber(st[1] or '-1') == g then\n"
    "  if st[2] == '1' then return 0 end\n"
    "  redis.call('HSET', KEYS[2], 'open', 1, 'opened_ms', now, 'reason', ARGV[2])\n"
    "else\n"
    "  redis.call('HSET', KEYS[2], 'round', g, 'open', 1, 'opened_ms', now, 'last_ms', 0, 'seq', "
    "0, 'reason', ARGV[2])\n"
    "end\n"
    "redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'round_open', 'node', '', "
    "'rank', '-1', 'gen', g, 'step', '-1', 'detail', ARGV[2], 't_fault_ms', '0', 't_detect_ms', "
    "now)\n"
    "return 1\n";

/* KEYS: gen, rdzv. Returns {gen, open}. */
static const char lua_state[] =
    LUA_READ_GEN
    "if g == 0 then return {0, 1} end\n"
    "local st = redis.call('HMGET', KEYS[2], 'round', 'open')\n"
    "if tonumber(st[1] or '-1') == g and st[2] == '1' then return {g, 1} end\n"
    "return {g, 0}\n";

/* KEYS: alive. Returns the live registrants (their entries not yet expired). */
static const char lua_live[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')\n";

/* KEYS: gen. ARGV: gen, world. The world already there is read as strictly as gen (and
 * at most 2^24, as control.c reads it): tonumber made 0 ("unset") of garbage, which was
 * then overwritten, and 4 of " 4". */
static const char lua_world[] =
    LUA_READ_GEN
    "if g ~= tonumber(ARGV[1]) then return redis.error_reply('FTC_STALE generation is ' .. g .. "
    "', not ' .. ARGV[1]) end\n"
    "local rw = redis.call('HGET', KEYS[1], 'world')\n"
    "local w = 0\n"
    "if rw then\n"
    "  w = string.match(rw, '^%d+$') and tonumber(rw)\n"
    "  if not w or w > 16777216 then return redis.error_reply('FTC_CORRUPT ' .. KEYS[1] .. "
    "' field world holds \"' .. string.sub(rw, 1, 40) .. '\" (not a decimal integer up to "
    "2^24)') end\n"
    "end\n"
    "if w ~= 0 and w ~= tonumber(ARGV[2]) then return redis.error_reply('FTC_CONFLICT generation "
    "' .. g .. ' already has world ' .. w .. ', not ' .. ARGV[2]) end\n"
    "redis.call('HSET', KEYS[1], 'world', ARGV[2])\n"
    "return 1\n";

#define EVENTS_CAP "10000" /* FTC_CTL_EVENTS_CAP */

static bool valid_id(const char *s, size_t max, bool node)
{
    if (!s)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-' &&
            !(node && (s[i] == ':' || s[i] == '/')))
            return false;
    return true;
}

static int check_job(const char *job, ftc_err_t *err)
{
    if (!valid_id(job, 63, false))
        return ftc_err_set(
            err, FTC_EINVAL,
            "rendezvous: job id '%.80s' must be 1..63 characters of A-Z a-z 0-9 . _ -",
            job ? job : "");
    return 0;
}

/* A generation the scripts hold exactly (a Lua number), else FTC_EINVAL. */
static int check_gen(uint64_t gen, uint64_t max, const char *what, ftc_err_t *err)
{
    if (gen > max)
        return ftc_err_set(err, FTC_EINVAL,
                           "rendezvous: %s %" PRIu64 " is above %" PRIu64
                           " (the scripts hold generations exactly only below 2^53)",
                           what, gen, max);
    return 0;
}

static void key(char *buf, size_t cap, const char *job, const char *suffix)
{
    snprintf(buf, cap, "ftc:{%s}:%s", job, suffix);
}

/* Maps a failed script call to an FTC_E* code with the server's words, by the code of its
 * error reply (detect/redis.h: ftc_redis_reply_error): the scripts' own refusals
 * (FTC_STALE, FTC_CORRUPT, FTC_CONFLICT), WRONGTYPE (a key of the round holds another type)
 * and NOPERM (the ACL user may not run the scripts or use the keys). A refusal from the
 * server that waiting does not cure (ftc_redis_transient false: READONLY, OOM, a script
 * error...) gets the hint of what to do. */
static int script_rc(ftc_redis_t *r, int rc, const char *what, ftc_err_t *err)
{
    const char *msg = ftc_redis_errstr(r), *word = ftc_redis_reply_error(r);
    bool own = !strncmp(word, "FTC_", 4);
    if (!strcmp(word, "FTC_STALE"))
        rc = FTC_ESTALE;
    else if (!strcmp(word, "FTC_CORRUPT"))
        rc = FTC_EPROTO;
    else if (!strcmp(word, "FTC_CONFLICT"))
        rc = FTC_EEXIST;
    else if (!strcmp(word, "WRONGTYPE"))
        rc = FTC_EPROTO;
    else if (!strcmp(word, "NOPERM"))
        rc = FTC_EAUTH;
    const char *hint = own || ftc_redis_transient(r) ? "" : ftc_redis_hint(r);
    return ftc_err_set(err, rc, "%s: %s%s%s", what, msg, hint[0] ? "; " : "", hint);
}

void ftc_rdzv_round_free(ftc_rdzv_round_t *r)
{
    if (!r)
        return;
    free(r->members);
    free(r->spare_ids);
    memset(r, 0, sizeof *r);
}

/* Splits a space-separated id list into an allocated array. */
int ftc_rdzv_split_ids(const char *s, size_t len, char (**out)[FTC_RDZV_NODE_MAX + 1], int *n,
                       const char *what, ftc_err_t *err)
{
    *out = NULL;
    *n = 0;
    int cap = 1;
    for (size_t i = 0; i < len; i++)
        cap += s[i] == ' ';
    *out = calloc((size_t)cap, sizeof **out);
    if (!*out)
        return ftc_err_set(err, FTC_ENOMEM, "rendezvous: out of memory for %d ids", cap);
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ')
            i++;
        size_t j = i;
        while (j < len && s[j] != ' ')
            j++;
        if (j == i)
            break;
        if (j - i > FTC_RDZV_NODE_MAX)
            return ftc_err_set(err, FTC_EPROTO,
                               "rendezvous result: %s holds an id of %zu bytes ('%.40s...'), more "
                               "than %d",
                               what, j - i, s + i, FTC_RDZV_NODE_MAX);
        memcpy((*out)[*n], s + i, j - i);
        (*out)[*n][j - i] = '\0';
        /* an id as a node joins with it: a NUL byte made it shorter, or
         * empty (fuzz_records), and no node could be found by it */
        if (strlen((*out)[*n]) != j - i || !valid_id((*out)[*n], FTC_RDZV_NODE_MAX, true))
            return ftc_err_set(err, FTC_EPROTO,
                               "rendezvous result: %s holds an id that is not 1..%d of "
                               "[A-Za-z0-9._:/-] ('%.40s')",
                               what, FTC_RDZV_NODE_MAX, (*out)[*n]);
        (*n)++;
        i = j;
    }
    return 0;
}

/* Parses {2, gen, members, spares, prev} into *out and finds this node. */
static int parse_round(ftc_redis_reply_t **el, size_t cnt, const char *node, uint64_t after,
                       ftc_rdzv_round_t *out, ftc_err_t *err)
{
    long long g, prev;
    const char *ms, *ss;
    size_t ml, sl;
    int rc;
    if (cnt != 5)
        return ftc_err_set(err, FTC_EPROTO, "rendezvous result: %zu fields, expected 5", cnt);
    if ((rc = ftc_redis_want_int(el[1], "rendezvous result gen", &g, err)) ||
        (rc = ftc_redis_want_str(el[2], "rendezvous result members", &ms, &ml, err)) ||
        (rc = ftc_redis_want_str(el[3], "rendezvous result spares", &ss, &sl, err)) ||
        (rc = ftc_redis_want_int(el[4], "rendezvous result prev", &prev, err)))
        return rc == FTC_ENOENT ? FTC_EPROTO : rc;
    if (g != (long long)after + 1)
        return ftc_err_set(err, FTC_EPROTO,
                           "rendezvous result of the round after %" PRIu64
                           " says generation %lld, not %" PRIu64,
                           after, g, after + 1);
    out->generation = (uint64_t)g;
    if ((rc = ftc_rdzv_split_ids(ms, ml, &out->members, &out->nodes, "members", err)) ||
        (rc = ftc_rdzv_split_ids(ss, sl, &out->spare_ids, &out->spares, "spares", err))) {
        ftc_rdzv_round_free(out);
        return rc;
    }
    if (out->nodes < 1 || prev < 0 || prev > out->nodes) {
        int n = out->nodes;
        ftc_rdzv_round_free(out);
        return ftc_err_set(err, FTC_EPROTO, "rendezvous result: %d members, %lld previous", n,
                           prev);
    }
    out->prev_nodes = (int)prev;
    out->index = -1;
    for (int i = 0; i < out->nodes; i++)
        if (!strcmp(out->members[i], node))
            out->index = i;
    if (out->index >= 0)
        return 0;
    for (int i = 0; i < out->spares; i++)
        if (!strcmp(out->spare_ids[i], node))
            return 0;
    ftc_rdzv_round_free(out);
    return ftc_err_set(err, FTC_ESTALE,
                       "rendezvous: the round after generation %" PRIu64
                       " closed (generation %lld) without node '%s' (it was not registered when "
                       "the round closed: it came late, or its registration expired); join the "
                       "round after %lld",
                       after, g, node, g);
}

typedef struct join_keys {
    char gen[128], rdzv[128], reg[160], alive[160], out[160], roster[128], events[128],
        seen[160];
} join_keys_t;

static void make_keys(join_keys_t *k, const char *job, uint64_t after)
{
    char s[96];
    key(k->gen, sizeof k->gen, job, "gen");
    key(k->rdzv, sizeof k->rdzv, job, "rdzv");
    snprintf(s, sizeof s, "rdzv:%" PRIu64 ":reg", after);
    key(k->reg, sizeof k->reg, job, s);
    snprintf(s, sizeof s, "rdzv:%" PRIu64 ":alive", after);
    key(k->alive, sizeof k->alive, job, s);
    snprintf(s, sizeof s, "rdzv:%" PRIu64 ":out", after);
    key(k->out, sizeof k->out, job, s);
    snprintf(s, sizeof s, "rdzv:%" PRIu64 ":seen", after);
    key(k->seen, sizeof k->seen, job, s);
    key(k->roster, sizeof k->roster, job, "roster");
    key(k->events, sizeof k->events, job, "events");
}

/* "N registered (a, b, ...)" for error messages: the live registrants. */
static void describe_live(ftc_redis_t *r, const join_keys_t *k, char *buf, size_t cap)
{
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_live", lua_live);
    const char *keys[] = {k->alive};
    ftc_redis_reply_t *rep = NULL;
    ftc_redis_reply_t **el;
    size_t n;
    ftc_err_t e = {0};
    if (ftc_redis_eval(r, &s, 1, keys, 0, NULL, &rep) ||
        ftc_redis_want_array(rep, "rdzv_live", -1, &el, &n, &e)) {
        snprintf(buf, cap, "an unknown number registered (Redis: %s)", ftc_redis_errstr(r));
        ftc_redis_reply_free(rep);
        return;
    }
    size_t at = (size_t)snprintf(buf, cap, "%zu registered (", n);
    for (size_t i = 0; i < n && at < cap; i++) {
        const char *str = el[i]->type == REDIS_REPLY_STRING ? el[i]->str : "?";
        if (at + strlen(str) + 8 >= cap) {
            at += (size_t)snprintf(buf + at, cap - at, "%s...", i ? ", " : "");
            break;
        }
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", str);
    }
    if (at < cap)
        snprintf(buf + at, cap - at, ")");
    ftc_redis_reply_free(rep);
}

/* Withdraws the registration. Returns 0 with *out filled when the round had
 * already closed with this node in it, else non-zero (withdrawn, or Redis
 * away: the entry then expires by itself). */
static int withdraw(ftc_redis_t *r, const ftc_redis_script_t *s, const join_keys_t *k,
                    const char *const *args11, uint64_t after, ftc_rdzv_round_t *out)
{
    const char *keys[] = {k->gen, k->rdzv, k->reg, k->alive, k->out, k->roster, k->events, k->seen};
    const char *args[11];
    memcpy(args, args11, sizeof args);
    args[7] = "leave";
    ftc_redis_reply_t *rep = NULL;
    if (ftc_redis_eval(r, s, 8, keys, 11, args, &rep))
        return FTC_EREDIS;
    ftc_redis_reply_t **el;
    size_t cnt;
    long long state = -1;
    ftc_err_t e = {0};
    int rc = ftc_redis_want_array(rep, "rendezvous leave", -1, &el, &cnt, &e);
    if (!rc && cnt >= 1)
        rc = ftc_redis_want_int(el[0], "rendezvous leave state", &state, &e);
    rc = !rc && state == 2 ? parse_round(el, cnt, args11[0], after, out, &e) : FTC_ENOENT;
    ftc_redis_reply_free(rep);
    return rc;
}

int ftc_rdzv_join(ftc_redis_t *r, const ftc_rdzv_options_t *o, uint64_t after_gen,
                  ftc_rdzv_round_t *out, ftc_deadline_t dl, const atomic_int *abort,
                  ftc_err_t *err)
{
    int rc;
    if (out)
        memset(out, 0, sizeof *out);
    if (!r || !o || !out)
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: NULL connection, options or output");
    if (o->struct_size < sizeof(ftc_rdzv_options_t))
        return ftc_err_set(err, FTC_EINVAL,
                           "rendezvous: options struct_size %u < %zu (use FTC_RDZV_OPTIONS_INIT)",
                           o->struct_size, sizeof(ftc_rdzv_options_t));
    if ((rc = check_job(o->job, err)))
        return rc;
    if (!valid_id(o->node_id, FTC_RDZV_NODE_MAX, true))
        return ftc_err_set(err, FTC_EINVAL,
                           "rendezvous: node id '%.80s' is not 1..%d of [A-Za-z0-9._:/-]",
                           o->node_id ? o->node_id : "", FTC_RDZV_NODE_MAX);
    if (o->min_nodes < 1 || o->max_nodes < 0 || (o->max_nodes && o->max_nodes < o->min_nodes) ||
        o->settle_ms < 0 || o->ttl_ms < 0 || o->survivor_wait_ms < 0)
        return ftc_err_set(err, FTC_EINVAL,
                           "rendezvous: min_nodes %d (>= 1), max_nodes %d (0 or >= min_nodes), "
                           "settle_ms %d, ttl_ms %d, survivor_wait_ms %d (>= 0)",
                           o->min_nodes, o->max_nodes, o->settle_ms, o->ttl_ms,
                           o->survivor_wait_ms);
    if ((rc = check_gen(after_gen, FTC_RDZV_GEN_MAX, "after_gen", err)))
        return rc;
    int settle = o->settle_ms ? o->settle_ms : 1000, ttl = o->ttl_ms ? o->ttl_ms : 3000;
    int sv_wait = o->survivor_wait_ms ? o->survivor_wait_ms : settle;
    int poll_ms = settle / 10 < ttl / 4 ? settle / 10 : ttl / 4;
    poll_ms = poll_ms < 5 ? 5 : poll_ms > 100 ? 100 : poll_ms;

    join_keys_t k;
    make_keys(&k, o->job, after_gen);
    const char *keys[] = {k.gen, k.rdzv, k.reg, k.alive, k.out, k.roster, k.events, k.seen};
    char a_after[24], a_min[16], a_max[16], a_settle[16], a_ttl[16];
    snprintf(a_after, sizeof a_after, "%" PRIu64, after_gen);
    snprintf(a_min, sizeof a_min, "%d", o->min_nodes);
    snprintf(a_max, sizeof a_max, "%d", o->max_nodes);
    snprintf(a_settle, sizeof a_settle, "%d", settle);
    snprintf(a_ttl, sizeof a_ttl, "%d", ttl);
    char a_open[2] = "0"; /* "1" once a poll found the round open (a reseed reopens it) */
    char a_hb[96], a_sv[16];
    key(a_hb, sizeof a_hb, o->job, "hb:");
    snprintf(a_sv, sizeof a_sv, "%d", sv_wait);
    const char *args[] = {o->node_id, a_after, a_min, a_max, a_settle, a_ttl, EVENTS_CAP, "join",
                          a_open,     a_hb,    a_sv};
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_join", lua_join);

    long long registered = 0, open = 0;
    bool redis_ok = false, warned = false;
    char last_redis[FTC_ERR_MSG_MAX] = "", last_word[24] = "";
    char what[256];
    snprintf(what, sizeof what, "rendezvous after generation %" PRIu64 " (job %s, round %s)",
             after_gen, o->job, k.rdzv);
    for (bool last_try = false;; last_try = ftc_deadline_expired(dl)) {
        if (abort && atomic_load(abort) && !redis_ok && last_redis[0])
            /* Redis did not answer the last poll: describing and withdrawing
             * would wait a command timeout each (seconds, not the few
             * milliseconds an abort takes); the entry expires by itself */
            return ftc_err_set(err, FTC_ECANCELED,
                               "rendezvous after generation %" PRIu64
                               " aborted while Redis did not answer (%s); the registration "
                               "expires by itself within ttl_ms %d",
                               after_gen, last_redis, ttl);
        if (abort && atomic_load(abort)) {
            char who[300];
            describe_live(r, &k, who, sizeof who);
            if (withdraw(r, &s, &k, args, after_gen, out) == 0) {
                uint64_t g = out->generation;
                int idx = out->index;
                ftc_rdzv_round_free(out);
                return ftc_err_set(err, FTC_ECANCELED,
                                   "rendezvous after generation %" PRIu64 " aborted, but the "
                                   "round had closed (generation %" PRIu64 ", index %d): the "
                                   "others will find this node missing",
                                   after_gen, g, idx);
            }
            return ftc_err_set(err, FTC_ECANCELED,
                               "rendezvous after generation %" PRIu64 " aborted; %s", after_gen,
                               who);
        }
        ftc_redis_reply_t *rep = NULL;
        a_open[0] = open ? '1' : '0';
        rc = ftc_redis_eval(r, &s, 8, keys, 11, args, &rep);
        if (rc) {
            rc = script_rc(r, rc, what, err);
            /* a refusal that waiting does not cure (a stale generation, a key holding
             * garbage, a password or permission refused, READONLY, OOM, a script error):
             * at once, not as a timeout after the whole deadline */
            if (!ftc_redis_transient(r))
                return rc;
            /* Redis away or busy (LOADING, BUSY...): keep trying until the deadline (I6) */
            redis_ok = false;
            snprintf(last_redis, sizeof last_redis, "%s", ftc_err_str(err));
            snprintf(last_word, sizeof last_word, "%s", ftc_redis_reply_error(r));
            if (!warned)
                FTC_WARN("rdzv", "%s; retrying until the deadline (%d ms left)", last_redis,
                         ftc_deadline_remaining_ms(dl));
            warned = true;
            /* no last try after a poll that Redis left unanswered into the
             * deadline: another would overrun it by a second command timeout */
            if (ftc_deadline_expired(dl))
                break;
        } else {
            ftc_redis_reply_t **el;
            size_t cnt;
            long long state = -1;
            redis_ok = true;
            rc = ftc_redis_want_array(rep, "rendezvous", -1, &el, &cnt, err);
            if (!rc && cnt >= 1)
                rc = ftc_redis_want_int(el[0], "rendezvous state", &state, err);
            if (!rc && state == 2)
                rc = parse_round(el, cnt, o->node_id, after_gen, out, err);
            else if (!rc && state == 0 && cnt == 4) {
                if ((rc = ftc_redis_want_int(el[1], "rendezvous registered", &registered, err)) ==
                    0)
                    rc = ftc_redis_want_int(el[2], "rendezvous open", &open, err);
            } else if (!rc)
                rc = ftc_err_set(err, FTC_EPROTO, "rendezvous: reply state %lld with %zu fields",
                                 state, cnt);
            ftc_redis_reply_free(rep);
            if (rc || state == 2)
                return rc;
        }
        if (last_try)
            break;
        /* sleep until the next poll in short slices, so an abort is seen at once */
        ftc_deadline_t next = ftc_deadline_min(dl, ftc_deadline_in_ms((uint64_t)poll_ms));
        while (!ftc_deadline_expired(next) && !(abort && atomic_load(abort))) {
            int left = ftc_deadline_remaining_ms(next);
            ftc_sleep_ms((uint64_t)(left < 5 ? left : 5));
        }
    }
    if (!redis_ok && last_word[0])
        return ftc_err_set(err, FTC_ETIMEDOUT,
                           "rendezvous after generation %" PRIu64
                           ": deadline passed while Redis answered %s (%s)",
                           after_gen, last_word, last_redis);
    if (!redis_ok)
        return ftc_err_set(err, FTC_ETIMEDOUT,
                           "rendezvous after generation %" PRIu64
                           ": deadline passed while Redis did not answer (%s)",
                           after_gen, last_redis);
    char who[300];
    describe_live(r, &k, who, sizeof who);
    if (withdraw(r, &s, &k, args, after_gen, out) == 0)
        return 0; /* it closed with this node in it just now */
    return ftc_err_set(err, FTC_ETIMEDOUT,
                       "rendezvous after generation %" PRIu64
                       ": deadline passed with %s, min_nodes %d%s",
                       after_gen, who, o->min_nodes,
                       open ? ""
                            : "; the round is not open (no one called ftc_rdzv_request for "
                              "this generation)");
}

int ftc_rdzv_request(ftc_redis_t *r, const char *job, uint64_t seen_gen, const char *reason,
                     bool *opened, ftc_err_t *err)
{
    int rc;
    if ((rc = check_job(job, err)) || (rc = check_gen(seen_gen, FTC_RDZV_GEN_MAX, "seen_gen", err)))
        return rc;
    char g[128], st[128], ev[128], seen[24];
    key(g, sizeof g, job, "gen");
    key(st, sizeof st, job, "rdzv");
    key(ev, sizeof ev, job, "events");
    snprintf(seen, sizeof seen, "%" PRIu64, seen_gen);
    const char *keys[] = {g, st, ev};
    const char *args[] = {seen, reason ? reason : "", EVENTS_CAP};
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_request", lua_request);
    ftc_redis_reply_t *rep;
    if ((rc = ftc_redis_eval(r, &s, 3, keys, 3, args, &rep)))
        return script_rc(r, rc, "rendezvous request", err);
    long long v;
    rc = ftc_redis_want_int(rep, "rdzv_request", &v, err);
    ftc_redis_reply_free(rep);
    if (!rc && opened)
        *opened = v == 1;
    return rc;
}

int ftc_rdzv_state(ftc_redis_t *r, const char *job, uint64_t *gen, bool *round_open,
                   ftc_err_t *err)
{
    int rc;
    if ((rc = check_job(job, err)))
        return rc;
    char g[128], st[128];
    key(g, sizeof g, job, "gen");
    key(st, sizeof st, job, "rdzv");
    const char *keys[] = {g, st};
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_state", lua_state);
    ftc_redis_reply_t *rep;
    if ((rc = ftc_redis_eval(r, &s, 2, keys, 0, NULL, &rep)))
        return script_rc(r, rc, "rendezvous state", err);
    ftc_redis_reply_t **el;
    size_t n;
    long long gv = 0, ov = 0;
    rc = ftc_redis_want_array(rep, "rdzv_state", 2, &el, &n, err);
    if (!rc)
        rc = ftc_redis_want_int(el[0], "rdzv_state gen", &gv, err);
    if (!rc)
        rc = ftc_redis_want_int(el[1], "rdzv_state open", &ov, err);
    ftc_redis_reply_free(rep);
    if (!rc && gv < 0)
        rc = ftc_err_set(err, FTC_EPROTO, "rendezvous state: %s holds generation %lld", g, gv);
    if (!rc) {
        *gen = (uint64_t)gv;
        *round_open = ov == 1;
    }
    return rc;
}

int ftc_rdzv_waiting(ftc_redis_t *r, const char *job, uint64_t gen, int *n, ftc_err_t *err)
{
    int rc;
    if ((rc = check_job(job, err)))
        return rc;
    join_keys_t k;
    make_keys(&k, job, gen);
    const char *keys[] = {k.alive};
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_live", lua_live);
    ftc_redis_reply_t *rep;
    if ((rc = ftc_redis_eval(r, &s, 1, keys, 0, NULL, &rep)))
        return script_rc(r, rc, "rendezvous waiting", err);
    ftc_redis_reply_t **el;
    size_t cnt;
    rc = ftc_redis_want_array(rep, "rdzv_live", -1, &el, &cnt, err);
    ftc_redis_reply_free(rep);
    if (!rc)
        *n = (int)cnt;
    return rc;
}

int ftc_rdzv_set_world(ftc_redis_t *r, const char *job, uint64_t gen, uint32_t world,
                       ftc_err_t *err)
{
    int rc;
    if ((rc = check_job(job, err)) || (rc = check_gen(gen, FTC_RDZV_GEN_MAX + 1, "gen", err)))
        return rc;
    if (world < 1 || world > (1u << 24))
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: world %u is not in 1..%u", world,
                           1u << 24);
    char g[128], ga[24], wa[16];
    key(g, sizeof g, job, "gen");
    snprintf(ga, sizeof ga, "%" PRIu64, gen);
    snprintf(wa, sizeof wa, "%u", world);
    const char *keys[] = {g};
    const char *args[] = {ga, wa};
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "rdzv_world", lua_world);
    if ((rc = ftc_redis_eval(r, &s, 1, keys, 2, args, NULL)))
        return script_rc(r, rc, "rendezvous set_world", err);
    return 0;
}
