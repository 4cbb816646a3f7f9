/*
 * status.c — see status.h.
 */
#include "detect/status.h"

#include "core/clock.h"
#include "core/config.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void ftc__problem(ftc_status_t *s, const char *msg)
{
    size_t n = strlen(s->problems);
    if (n + 3 >= sizeof s->problems)
        return;
    snprintf(s->problems + n, sizeof s->problems - n, "%s%s", n ? "; " : "", msg);
}

void ftc_status_event_field(ftc_status_event_t *e, const char *k, const char *v)
{
    /* a number only whole and in range, else the field's "unknown": atoi
     * and atoll took "7x" for 7 and cut 2^32 to 0, strtoull "-1" for 2^64-1
     * (fuzz_records) */
    int64_t x;
    uint64_t u;
    if (!strcmp(k, "kind"))
        snprintf(e->kind, sizeof e->kind, "%s", v);
    else if (!strcmp(k, "node"))
        snprintf(e->node, sizeof e->node, "%s", v);
    else if (!strcmp(k, "rank"))
        e->rank = ftc_parse_int(v, -1, INT_MAX, &x) ? -1 : (int)x;
    else if (!strcmp(k, "gen"))
        e->gen = ftc_parse_int(v, 0, INT64_MAX, &x) ? -1 : x;
    else if (!strcmp(k, "step"))
        e->step = ftc_parse_int(v, -1, INT64_MAX, &x) ? -1 : x;
    else if (!strcmp(k, "t_detect_ms"))
        e->t_detect_ms = ftc_parse_u64(v, &u) ? 0 : u;
    else if (!strcmp(k, "detail"))
        snprintf(e->detail, sizeof e->detail, "%s", v);
}

/* Fills e from a stream entry [id, [field, value, ...]]; false on garbage. */
static bool ftc__parse_entry(const redisReply *ent, ftc_status_event_t *e)
{
    memset(e, 0, sizeof *e);
    e->rank = -1;
    e->step = -1;
    if (ent->type != REDIS_REPLY_ARRAY || ent->elements != 2 ||
        ent->element[0]->type != REDIS_REPLY_STRING || ent->element[1]->type != REDIS_REPLY_ARRAY)
        return false;
    snprintf(e->id, sizeof e->id, "%s", ent->element[0]->str);
    const redisReply *f = ent->element[1];
    for (size_t j = 0; j + 1 < f->elements; j += 2) {
        if (f->element[j]->type != REDIS_REPLY_STRING ||
            f->element[j + 1]->type != REDIS_REPLY_STRING)
            return false;
        ftc_status_event_field(e, f->element[j]->str, f->element[j + 1]->str);
    }
    if (!e->kind[0])
        snprintf(e->kind, sizeof e->kind, "?");
    return true;
}

/* Reads GET and PTTL of every member's heartbeat key, PAGE members per
 * pipeline. A page that fails at the transport (Redis stalled or gone) marks
 * it and every later member with the error and ends the reads: the snapshot
 * takes one command deadline, not one per member. */
static int ftc__heartbeats(ftc_ctl_t *c, ftc_status_t *s)
{
    enum { PAGE = 256 };
    ftc_redis_t *r = ftc_ctl_redis(c);
    char(*keys)[256] = calloc(PAGE, sizeof *keys);
    const char *(*av)[2] = calloc(2 * PAGE, sizeof *av);
    const char ***avp = calloc(2 * PAGE, sizeof *avp);
    int *ac = calloc(2 * PAGE, sizeof *ac);
    ftc_redis_reply_t **reps = calloc(2 * PAGE, sizeof *reps);
    int rc = 0;
    if (!keys || !av || !avp || !ac || !reps) {
        rc = FTC_ENOMEM;
        goto out;
    }
    for (int base = 0; base < s->n_members; base += PAGE) {
        int n = s->n_members - base < PAGE ? s->n_members - base : PAGE;
        for (int i = 0; i < n; i++) {
            char suffix[FTC_CTL_NODE_MAX + 8];
            snprintf(suffix, sizeof suffix, "hb:%s", s->members[base + i].node);
            ftc_ctl_key(c, suffix, keys[i], sizeof keys[i]);
            av[2 * i][0] = "GET";
            av[2 * i + 1][0] = "PTTL";
            av[2 * i][1] = av[2 * i + 1][1] = keys[i];
            avp[2 * i] = av[2 * i];
            avp[2 * i + 1] = av[2 * i + 1];
            ac[2 * i] = ac[2 * i + 1] = 2;
        }
        int prc = ftc_redis_pipeline(r, true, 2 * n, ac, (const char **const *)avp, NULL, reps);
        bool transport = prc != 0 && !reps[0];
        for (int i = 0; i < n; i++) {
            ftc_status_member_t *m = &s->members[base + i];
            redisReply *h = reps[2 * i], *t = reps[2 * i + 1];
            if (transport || !h) {
                if (!m->problem[0])
                    snprintf(m->problem, sizeof m->problem, "%.150s", ftc_redis_errstr(r));
                continue;
            }
            if (h->type == REDIS_REPLY_STRING) {
                m->alive = true;
                ftc_err_t err = {0};
                if (ftc_ctl_heartbeat_parse(h->str, h->len, &m->hb, &err) != 0 && !m->problem[0])
                    snprintf(m->problem, sizeof m->problem, "%s", err.msg);
                else
                    m->hb_age_ms = (long long)s->now_ms - (long long)m->hb.wall_ms;
                if (t && t->type == REDIS_REPLY_INTEGER)
                    m->hb_ttl_ms = t->integer;
            } else if (h->type == REDIS_REPLY_ERROR && !m->problem[0]) {
                snprintf(m->problem, sizeof m->problem, "%s: %.120s", keys[i], h->str);
            }
        }
        for (int i = 0; i < 2 * n; i++) {
            ftc_redis_reply_free(reps[i]);
            reps[i] = NULL;
        }
        if (transport) { /* the rest would wait out a deadline each */
            for (int i = base + n; i < s->n_members; i++)
                if (!s->members[i].problem[0])
                    snprintf(s->members[i].problem, sizeof s->members[i].problem, "%.150s",
                             ftc_redis_errstr(r));
            break;
        }
    }
out:
    free(keys);
    free(av);
    free(avp);
    free(ac);
    free(reps);
    return rc;
}

int ftc_status_collect(ftc_ctl_t *c, const char *job, int max_events, ftc_status_t **out)
{
    *out = NULL;
    ftc_status_t *s = calloc(1, sizeof *s);
    if (!s)
        return FTC_ENOMEM;
    snprintf(s->job, sizeof s->job, "%s", job);
    s->now_ms = ftc_wall_ms();
    ftc_redis_t *r = ftc_ctl_redis(c);
    int rc = ftc_ctl_generation(c, &s->generation, &s->world);
    if (rc == FTC_EPROTO || rc == FTC_EREDIS)
        ftc__problem(s, ftc_ctl_errstr(c));
    if (rc && rc != FTC_EPROTO && rc != FTC_EREDIS)
        goto fail;
    rc = ftc_ctl_leader(c, s->leader, sizeof s->leader, &s->epoch, &s->leader_ttl_ms);
    if (rc == FTC_EPROTO || rc == FTC_EREDIS)
        ftc__problem(s, ftc_ctl_errstr(c));
    else if (rc)
        goto fail;
    rc = ftc_ctl_committed(c, &s->committed_step, &s->committed_gen);
    if (rc == FTC_EPROTO || rc == FTC_EREDIS)
        ftc__problem(s, ftc_ctl_errstr(c));
    else if (rc)
        goto fail;
    char key[160];
    ftc_redis_reply_t *rep = NULL;
    rc = ftc_redis_cmdv(r, true, &rep, "HGETALL", ftc_ctl_key(c, "members", key, sizeof key), NULL);
    if (rc == FTC_EREDIS && strstr(ftc_redis_errstr(r), "WRONGTYPE")) {
        ftc__problem(s, ftc_redis_errstr(r));
    } else if (rc) {
        goto fail;
    } else if (rep->type == REDIS_REPLY_ARRAY) {
        size_t nm = rep->elements / 2;
        s->members = calloc(nm ? nm : 1, sizeof *s->members);
        if (!s->members) {
            ftc_redis_reply_free(rep);
            rc = FTC_ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < nm; i++) {
            redisReply *k = rep->element[2 * i], *v = rep->element[2 * i + 1];
            ftc_status_member_t *m = &s->members[s->n_members++];
            if (k->type != REDIS_REPLY_STRING) {
                snprintf(m->node, sizeof m->node, "?");
                snprintf(m->problem, sizeof m->problem, "member name is not a string");
                continue;
            }
            snprintf(m->node, sizeof m->node, "%.*s",
                     (int)(k->len > FTC_CTL_NODE_MAX ? FTC_CTL_NODE_MAX : k->len), k->str);
            ftc_ctl_member_rec_t rec = {0};
            bool ok = v->type == REDIS_REPLY_STRING &&
                      ftc_ctl_member_parse(v->str, &rec, NULL) == 0 && rec.joined_ok;
            /* what could be read is shown even next to the problem */
            snprintf(m->host, sizeof m->host, "%s", rec.host);
            snprintf(m->domain, sizeof m->domain, "%s", rec.domain);
            m->pid = rec.pid;
            m->joined_ms = rec.joined_ms;
            if (!ok)
                snprintf(m->problem, sizeof m->problem,
                         "member record is not \"host domain pid joined_ms\"");
        }
        /* each member's heartbeat and its TTL: a page of members per pipeline
         * (one round trip and one deadline), not two round trips each — a
         * Redis that stalled mid-way cost 2 x members command deadlines */
        rc = ftc__heartbeats(c, s);
        if (rc == FTC_ENOMEM) {
            ftc_redis_reply_free(rep);
            goto fail;
        }
        rc = 0;
    }
    ftc_redis_reply_free(rep);
    rep = NULL;
    if (max_events > 0) {
        char cnt[16];
        snprintf(cnt, sizeof cnt, "%d", max_events);
        rc = ftc_redis_cmdv(r, true, &rep, "XREVRANGE", ftc_ctl_key(c, "events", key, sizeof key),
                            "+", "-", "COUNT", cnt, NULL);
        if (rc == 0 && rep->type == REDIS_REPLY_ARRAY) {
            s->events = calloc(rep->elements ? rep->elements : 1, sizeof *s->events);
            if (!s->events) {
                ftc_redis_reply_free(rep);
                rc = FTC_ENOMEM;
                goto fail;
            }
            for (size_t i = rep->elements; i-- > 0;) /* oldest first */
                if (ftc__parse_entry(rep->element[i], &s->events[s->n_events]))
                    s->n_events++;
        } else if (rc) {
            ftc__problem(s, ftc_redis_errstr(r));
            snprintf(s->events_problem, sizeof s->events_problem, "%.250s",
                     ftc_redis_errstr(r));
        } else if (rep->type != REDIS_REPLY_ARRAY) {
            snprintf(s->events_problem, sizeof s->events_problem,
                     "%s: expected an array reply to XREVRANGE", key);
            ftc__problem(s, s->events_problem);
        }
        ftc_redis_reply_free(rep);
    }
    *out = s;
    return 0;
fail:
    ftc_status_free(s);
    return rc;
}

void ftc_status_free(ftc_status_t *s)
{
    if (!s)
        return;
    free(s->members);
    free(s->events);
    free(s);
}

static void ftc__fmt_time(unsigned long long ms, char *buf, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(buf, cap, "%02d:%02d:%02d.%03llu", tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

/* Length of the valid UTF-8 sequence at s (what jansson accepts: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 if invalid. */
static size_t ftc__u8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* src with every byte that is not part of valid UTF-8 replaced by '?' (a
 * record of garbage, a foreign value quoted in a detail): jansson refuses
 * such a string, and the member or event was left out of the JSON. */
static const char *ftc__u8(const char *src, char *buf, size_t cap)
{
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)src;
    while (*p && o + 1 < cap) {
        size_t n = ftc__u8_len(p);
        if (n == 0 || o + n >= cap) {
            buf[o++] = '?';
            p++;
            continue;
        }
        memcpy(buf + o, p, n);
        o += n;
        p += n;
    }
    buf[o] = '\0';
    return buf;
}

static json_t *ftc__event_json(const ftc_status_event_t *e)
{
    char kind[sizeof e->kind], node[sizeof e->node], detail[sizeof e->detail], id[sizeof e->id];
    return json_pack(
        "{s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:s}", "id", ftc__u8(e->id, id, sizeof id), "kind",
        ftc__u8(e->kind, kind, sizeof kind), "node", ftc__u8(e->node, node, sizeof node), "rank",
        e->rank, "generation", (json_int_t)e->gen, "step", (json_int_t)e->step, "t_detect_ms",
        (json_int_t)e->t_detect_ms, "detail", ftc__u8(e->detail, detail, sizeof detail));
}

void ftc_event_print_json(const ftc_status_event_t *e, FILE *out)
{
    json_t *o = ftc__event_json(e);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    json_decref(o);
}

void ftc_event_print(const ftc_status_event_t *e, FILE *out)
{
    char t[32];
    ftc__fmt_time(e->t_detect_ms, t, sizeof t);
    fprintf(out, "%s  %-11s node=%-10s rank=%-3d gen=%-3lld step=%-6lld %s\n", t, e->kind,
            e->node[0] ? e->node : "-", e->rank, e->gen, e->step, e->detail);
}

void ftc_status_print(const ftc_status_t *s, FILE *out)
{
    fprintf(out, "job %s  generation %" PRIu64 " (world %u)  committed step ", s->job,
            s->generation, s->world);
    if (s->committed_step >= 0)
        fprintf(out, "%" PRId64 " (gen %" PRIu64 ")\n", s->committed_step, s->committed_gen);
    else
        fprintf(out, "none\n");
    if (s->leader[0])
        fprintf(out, "leader %s  epoch %" PRIu64 "  lease %" PRId64 " ms left\n", s->leader,
                s->epoch, s->leader_ttl_ms);
    else
        fprintf(out, "leader none\n");
    if (s->problems[0])
        fprintf(out, "PROBLEMS: %s\n", s->problems);
    fprintf(out, "\n%-16s %-16s %-10s %-8s %-5s %-8s %-10s %-9s %s\n", "NODE", "HOST", "DOMAIN",
            "PID", "GEN", "STEP", "STEP_MS", "HB_AGE", "STATE");
    for (int i = 0; i < s->n_members; i++) {
        const ftc_status_member_t *m = &s->members[i];
        char age[24], st[24];
        if (m->alive && !m->problem[0]) {
            snprintf(age, sizeof age, "%lld ms", m->hb_age_ms);
            snprintf(st, sizeof st, "%.1f", (double)m->hb.step_time_us / 1000.0);
        } else {
            snprintf(age, sizeof age, "-");
            snprintf(st, sizeof st, "-");
        }
        fprintf(out, "%-16s %-16s %-10s %-8lld %-5llu %-8lld %-10s %-9s %s\n", m->node, m->host,
                m->domain, m->pid, (unsigned long long)m->hb.generation, (long long)m->hb.step, st,
                age, m->problem[0] ? m->problem : m->alive ? "alive" : "NO HEARTBEAT");
    }
    if (s->n_events) {
        fprintf(out, "\nrecent events:\n");
        for (int i = 0; i < s->n_events; i++) {
            fputs("  ", out);
            ftc_event_print(&s->events[i], out);
        }
    }
}

char *ftc_status_json(const ftc_status_t *s)
{
    json_t *root = json_object();
    json_t *members = json_array(), *events = json_array();
    if (!root || !members || !events) {
        json_decref(root);
        json_decref(members);
        json_decref(events);
        return NULL;
    }
    char tmp[sizeof s->problems];
    json_object_set_new(root, "job", json_string(ftc__u8(s->job, tmp, sizeof tmp)));
    json_object_set_new(root, "now_ms", json_integer((json_int_t)s->now_ms));
    json_object_set_new(root, "generation", json_integer((json_int_t)s->generation));
    json_object_set_new(root, "world", json_integer(s->world));
    json_object_set_new(root, "leader", s->leader[0] ? json_string(ftc__u8(s->leader, tmp,
                                                                           sizeof tmp))
                                                     : json_null());
    json_object_set_new(root, "epoch", json_integer((json_int_t)s->epoch));
    json_object_set_new(root, "leader_ttl_ms", json_integer(s->leader_ttl_ms));
    json_object_set_new(root, "committed_step", json_integer(s->committed_step));
    json_object_set_new(root, "committed_generation", json_integer((json_int_t)s->committed_gen));
    json_object_set_new(root, "problems", json_string(ftc__u8(s->problems, tmp, sizeof tmp)));
    for (int i = 0; i < s->n_members; i++) {
        const ftc_status_member_t *m = &s->members[i];
        char node[sizeof m->node], host[sizeof m->host], dom[sizeof m->domain],
            prob[sizeof m->problem];
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:s}",
                              "node", ftc__u8(m->node, node, sizeof node), "host",
                              ftc__u8(m->host, host, sizeof host), "domain",
                              ftc__u8(m->domain, dom, sizeof dom), "pid",
                              (json_int_t)m->pid, "joined_ms", (json_int_t)m->joined_ms, "alive",
                              m->alive, "generation", (json_int_t)m->hb.generation, "step",
                              (json_int_t)m->hb.step, "step_time_us",
                              (json_int_t)m->hb.step_time_us, "heartbeat_age_ms",
                              (json_int_t)m->hb_age_ms, "heartbeat_ttl_ms",
                              (json_int_t)m->hb_ttl_ms, "problem",
                              ftc__u8(m->problem, prob, sizeof prob));
        if (o)
            json_array_append_new(members, o);
    }
    for (int i = 0; i < s->n_events; i++) {
        json_t *o = ftc__event_json(&s->events[i]);
        if (o)
            json_array_append_new(events, o);
    }
    json_object_set_new(root, "members", members);
    json_object_set_new(root, "events", events);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

int ftc_events_read(ftc_ctl_t *c, char *after, size_t cap, int count, int block_ms,
                    ftc_status_event_fn fn, void *arg)
{
    char key[160], cnt[16], blk[16];
    ftc_ctl_key(c, "events", key, sizeof key);
    snprintf(cnt, sizeof cnt, "%d", count > 0 ? count : 100);
    snprintf(blk, sizeof blk, "%d", block_ms);
    ftc_redis_reply_t *rep = NULL;
    int rc;
    if (!strcmp(after, "$")) {
        /* "$" names no entry: XREAD reads what is added after the call
         * starts, and a caller reading again with "$" after a call that read
         * nothing lost whatever came between the two calls (or while Redis
         * was away). Pin it to the newest entry now ("0-0": the stream is
         * empty, so all of it is new). */
        rc = ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "XREVRANGE", key, "+", "-", "COUNT",
                            "1", NULL);
        if (rc)
            return rc;
        ftc_status_event_t e;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
            ftc__parse_entry(rep->element[0], &e))
            snprintf(after, cap, "%s", e.id);
        else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 0)
            snprintf(after, cap, "0-0");
        ftc_redis_reply_free(rep);
        rep = NULL;
        if (!strcmp(after, "$"))
            return FTC_EPROTO;
    }
    if (block_ms > 0)
        rc = ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "XREAD", "COUNT", cnt, "BLOCK", blk,
                            "STREAMS", key, after, NULL);
    else
        rc = ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "XREAD", "COUNT", cnt, "STREAMS", key,
                            after, NULL);
    if (rc)
        return rc;
    int n = 0;
    /* reply: nil (timeout) or [[key, [entries...]]] */
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
        rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2 &&
        rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
        redisReply *entries = rep->element[0]->element[1];
        for (size_t i = 0; i < entries->elements; i++) {
            ftc_status_event_t e;
            if (!ftc__parse_entry(entries->element[i], &e))
                continue;
            snprintf(after, cap, "%s", e.id);
            if (fn)
                fn(arg, &e);
            n++;
        }
    } else if (rep->type != REDIS_REPLY_NIL && rep->type != REDIS_REPLY_ARRAY) {
        ftc_redis_reply_free(rep);
        return FTC_EPROTO;
    }
    ftc_redis_reply_free(rep);
    return n;
}
