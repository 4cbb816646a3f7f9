/*
 * agent_parity.c — parity groups of the agent; see agent_parity.h.
 */
#include "ckpt/agent_parity.h"

#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MAGIC 0x3152415043544646ull /* "FFTCPAR1" */
#define META_FIXED 10
#define META_LEN(n) (META_FIXED + 3 * (uint64_t)(n))

int ftc__par_geometry(const ftc_redundancy_t *red, uint32_t nodes, uint32_t index,
                      ftc__par_geo_t *geo, ftc_err_t *err)
{
    memset(geo, 0, sizeof *geo);
    if (red->kind != FTC_RED_XOR && red->kind != FTC_RED_RS)
        return ftc_err_set(err, FTC_EINVAL, "parity geometry of a replica redundancy");
    int m = red->kind == FTC_RED_XOR ? 1 : red->m;
    int size = red->g + m;
    if (red->g < 1 || m < 1 || size > FTC_PARITY_MAX)
        return ftc_err_set(err, FTC_ECONFIG, "redundancy %s:%d+%d: groups of 2..%d nodes",
                           red->kind == FTC_RED_XOR ? "xor" : "rs", red->g, m, FTC_PARITY_MAX);
    uint32_t groups = nodes / (uint32_t)size;
    if (groups == 0)
        groups = 1; /* fewer nodes than one group: one group of all of them */
    uint32_t gi = index / (uint32_t)size;
    if (gi >= groups)
        gi = groups - 1; /* leftover nodes join the last group */
    geo->first = gi * (uint32_t)size;
    uint32_t n = gi == groups - 1 ? nodes - geo->first : (uint32_t)size;
    if (n <= (uint32_t)m)
        return ftc_err_set(err, FTC_ECONFIG,
                           "redundancy %s needs more than %d nodes per parity group, the job has "
                           "%u node(s): use more nodes or replicas (--redundancy K)",
                           red->kind == FTC_RED_XOR ? "xor" : "rs", m, nodes);
    if (n > FTC_PARITY_MAX)
        return ftc_err_set(err, FTC_ECONFIG,
                           "parity group of nodes %u..%u has %u members (the leftover of %u nodes "
                           "joined it), above the %d a code supports: choose G+M dividing the "
                           "node count",
                           geo->first, geo->first + n - 1, n, nodes, FTC_PARITY_MAX);
    geo->n = (int)n;
    geo->m = m;
    geo->d = (int)n - m;
    geo->member = (int)(index - geo->first);
    geo->xor_code = red->kind == FTC_RED_XOR;
    return 0;
}

/* Row of member i's chunk t; the member at data position t of row r. */
static int row_of(const ftc__par_geo_t *g, int i, int t)
{
    return ((i - g->m - t) % g->n + 2 * g->n) % g->n;
}
static int data_member(const ftc__par_geo_t *g, int r, int t) { return (r + g->m + t) % g->n; }
static int holder(const ftc__par_geo_t *g, int r, int j) { return (r + j) % g->n; }

/* Copies chunk t of a shard zero-padded to d*C bytes into out (C bytes). */
static void chunk_of(const uint8_t *shard, uint64_t size, int t, uint64_t C, uint8_t *out)
{
    uint64_t off = (uint64_t)t * C, n = off < size ? size - off : 0;
    if (n > C)
        n = C;
    if (n)
        memcpy(out, shard + off, n);
    memset(out + n, 0, C - n);
}

int ftc__par_encode(const ftc__par_geo_t *geo, const char *job, uint64_t step, uint64_t gen,
                    uint32_t local, const uint8_t *const *shards, const uint64_t *sizes,
                    const uint32_t *ranks, uint8_t **wraps, uint64_t *wrap_sizes, ftc_err_t *err)
{
    int n = geo->n, m = geo->m, d = geo->d;
    uint64_t mx = 0, heads[FTC_PARITY_MAX];
    for (int i = 0; i < n; i++) {
        wraps[i] = NULL;
        ftc_shard_view_t v;
        if (ftc_shard_open(&v, shards[i], sizes[i], 0, err) != 0)
            return err->code;
        if (v.info.step != step)
            return ftc_err_set(err, FTC_ECORRUPT, "parity encode: member %d's shard is of step %" PRIu64
                               ", not %" PRIu64, i, v.info.step, step);
        heads[i] = v.head_xxh3;
        mx = sizes[i] > mx ? sizes[i] : mx;
    }
    uint64_t C = ftc_parity_block_len((mx + (uint64_t)d - 1) / (uint64_t)d);
    ftc_parity_t *code = ftc_parity_create(d, m, geo->xor_code, err);
    if (!code)
        return err->code;
    int rc = 0;
    uint8_t *tmp = calloc((size_t)d, C);
    uint8_t *par[FTC_PARITY_MAX], *parp[FTC_PARITY_MAX][FTC_PARITY_MAX];
    uint64_t meta[META_FIXED + 3 * FTC_PARITY_MAX];
    if (!tmp) {
        rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory (%d x %" PRIu64 " bytes)",
                         d, C);
        goto out;
    }
    /* one wrapper per member: meta + its m parity chunks */
    for (int h = 0; h < n && !rc; h++) {
        ftc_shard_info_t in;
        memset(&in, 0, sizeof in);
        snprintf(in.job_id, sizeof in.job_id, "%s", job);
        in.step = step;
        in.generation = gen;
        in.dp = in.tp = in.pp = 1;
        ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
        if (!l) {
            rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory");
            break;
        }
        uint64_t ml = META_LEN(n);
        rc = ftc_shard_layout_add_tensor(l, "parity.meta", FTC_DTYPE_I64, 1, &ml, err) < 0;
        for (int j = 0; j < m && !rc; j++) {
            char name[32];
            snprintf(name, sizeof name, "parity.%d", j);
            rc = ftc_shard_layout_add_tensor(l, name, FTC_DTYPE_U8, 1, &C, err) < 0;
        }
        if (!rc) {
            wrap_sizes[h] = ftc_shard_layout_size(l);
            wraps[h] = calloc(1, wrap_sizes[h]);
            if (!wraps[h])
                rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory");
            else if (ftc_shard_layout_write(l, wraps[h], wrap_sizes[h], err))
                rc = 1;
        }
        if (!rc) {
            meta[0] = PAR_MAGIC, meta[1] = (uint64_t)n, meta[2] = (uint64_t)m;
            meta[3] = (uint64_t)d, meta[4] = C, meta[5] = (uint64_t)h, meta[6] = geo->first;
            meta[7] = local, meta[8] = step, meta[9] = geo->xor_code;
            for (int i = 0; i < n; i++) {
                meta[META_FIXED + 3 * i] = ranks[i];
                meta[META_FIXED + 3 * i + 1] = sizes[i];
                meta[META_FIXED + 3 * i + 2] = heads[i];
            }
            memcpy(ftc_shard_payload_ptr(l, wraps[h], 0), meta, ml * 8); /* little-endian hosts */
            for (int j = 0; j < m; j++)
                parp[h][j] = ftc_shard_payload_ptr(l, wraps[h], (uint32_t)(1 + j));
        }
        ftc_shard_layout_destroy(l);
        if (rc && !err->code)
            rc = ftc_err_set(err, FTC_EINVAL, "parity encode: layout failed");
        else if (rc)
            rc = err->code;
    }
    /* row r: data chunks -> parity j into holder (r+j)'s tensor parity.j */
    for (int r = 0; r < n && !rc; r++) {
        const uint8_t *dp[FTC_PARITY_MAX];
        for (int t = 0; t < d; t++) {
            int i = data_member(geo, r, t);
            chunk_of(shards[i], sizes[i], t, C, tmp + (uint64_t)t * C);
            dp[t] = tmp + (uint64_t)t * C;
        }
        for (int j = 0; j < m; j++)
            par[j] = parp[holder(geo, r, j)][j];
        if (!rc && ftc_parity_encode(code, dp, par, C, err))
            rc = err->code;
    }
    for (int h = 0; h < n && !rc; h++)
        if (ftc_shard_seal(wraps[h], wrap_sizes[h], 1, err))
            rc = err->code;
out:
    free(tmp);
    ftc_parity_destroy(code);
    if (rc)
        for (int i = 0; i < n; i++) {
            free(wraps[i]);
            wraps[i] = NULL;
        }
    return rc;
}

/* Reads a wrapper's meta (verifying the whole wrapper). false when unusable. */
static bool wrap_meta(const uint8_t *w, uint64_t size, uint64_t step, const uint64_t **meta,
                      uint64_t *mlen, ftc_shard_view_t *v)
{
    ftc_err_t e = {0};
    if (!w || ftc_shard_open(v, w, size, FTC_SHARD_VERIFY, &e) || v->info.step != step ||
        v->n_tensors < 2)
        return false;
    ftc_shard_tensor_t t;
    ftc_shard_get(v, 0, &t);
    if (t.dtype != FTC_DTYPE_I64 || t.length < META_FIXED * 8)
        return false;
    *meta = (const uint64_t *)(const void *)t.data; /* payloads are 64-byte aligned */
    *mlen = t.length / 8;
    return (*meta)[0] == PAR_MAGIC && *mlen == META_LEN((*meta)[1]);
}

int ftc__par_rebuild(const ftc__par_geo_t *geo, uint64_t step, uint32_t local, int lost,
                     const uint8_t *const *data, const uint64_t *dsizes,
                     const uint8_t *const *wraps, const uint64_t *wsizes, uint8_t **out,
                     uint64_t *out_size, ftc_err_t *err)
{
    int n = geo->n, m = geo->m, d = geo->d;
    *out = NULL;
    /* the reference version: the wrapper whose member table agrees with the
     * most surviving data shards (all wrappers of one encode agree) */
    const uint64_t *ref = NULL;
    uint64_t ref_len = 0;
    int ref_score = -1, wrappers_ok = 0;
    char notes[400] = "";
    for (int h = 0; h < n; h++) {
        const uint64_t *mt;
        uint64_t ml;
        ftc_shard_view_t v;
        if (!wrap_meta(wraps[h], wsizes[h], step, &mt, &ml, &v))
            continue;
        if (mt[1] != (uint64_t)n || mt[2] != (uint64_t)m || mt[3] != (uint64_t)d ||
            mt[5] != (uint64_t)h || mt[6] != geo->first || mt[7] != local || mt[8] != step)
            continue;
        wrappers_ok++;
        int score = 0;
        for (int i = 0; i < n; i++) {
            ftc_shard_view_t dv;
            ftc_err_t e = {0};
            if (data[i] && dsizes[i] == mt[META_FIXED + 3 * i + 1] &&
                ftc_shard_open(&dv, data[i], dsizes[i], 0, &e) == 0 &&
                dv.head_xxh3 == mt[META_FIXED + 3 * i + 2])
                score++;
        }
        if (score > ref_score)
            ref = mt, ref_len = ml, ref_score = score;
    }
    if (!ref)
        return ftc_err_set(err, FTC_ENOENT,
                           "no verified parity of step %" PRIu64 " (nodes %u..%u, local %u)", step,
                           geo->first, geo->first + (uint32_t)n - 1, local);
    uint64_t C = ref[4];
    uint64_t want = ref[META_FIXED + 3 * lost + 1], want_head = ref[META_FIXED + 3 * lost + 2];
    if (C == 0 || C % 64 || C > (1ull << 40) || want > C * (uint64_t)d)
        return ftc_err_set(err, FTC_ECORRUPT, "parity meta of step %" PRIu64 " is inconsistent",
                           step);
    /* usable pieces: data shards of exactly the recorded version, wrappers
     * whose meta equals the reference */
    bool have_data[FTC_PARITY_MAX], have_wrap[FTC_PARITY_MAX];
    const uint8_t *pchunk[FTC_PARITY_MAX][FTC_PARITY_MAX];
    for (int i = 0; i < n; i++) {
        ftc_shard_view_t dv;
        ftc_err_t e = {0};
        have_data[i] = i != lost && data[i] && dsizes[i] == ref[META_FIXED + 3 * i + 1] &&
                       ftc_shard_open(&dv, data[i], dsizes[i], 0, &e) == 0 &&
                       dv.head_xxh3 == ref[META_FIXED + 3 * i + 2];
        if (i != lost && data[i] && !have_data[i]) {
            size_t nl = strlen(notes);
            snprintf(notes + nl, sizeof notes - nl, "; member %d's shard is another version", i);
        }
        const uint64_t *mt;
        uint64_t ml;
        ftc_shard_view_t v;
        have_wrap[i] = wrap_meta(wraps[i], wsizes[i], step, &mt, &ml, &v) && ml == ref_len &&
                       !memcmp(mt + 1, ref + 1, 4 * 8) && !memcmp(mt + 6, ref + 6, (ml - 6) * 8) &&
                       v.n_tensors == (uint32_t)(1 + m);
        for (int j = 0; have_wrap[i] && j < m; j++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&v, (uint32_t)(1 + j), &t);
            if (t.length != C)
                have_wrap[i] = false;
            pchunk[i][j] = t.data;
        }
    }
    ftc_parity_t *code = ftc_parity_create(d, m, geo->xor_code, err);
    if (!code)
        return err->code;
    uint64_t full = C * (uint64_t)d;
    uint8_t *res = calloc(1, full);
    uint8_t *blk = calloc((size_t)(d + m), C);
    int rc = 0;
    if (!res || !blk) {
        rc = ftc_err_set(err, FTC_ENOMEM, "parity rebuild: out of memory");
        goto out;
    }
    for (int t = 0; t < d && !rc; t++) {
        int r = row_of(geo, lost, t);
        uint8_t *b[FTC_PARITY_MAX];
        bool gone[FTC_PARITY_MAX];
        int ngone = 0;
        char missing[160] = "";
        for (int k = 0; k < d + m; k++) {
            b[k] = blk + (uint64_t)k * C;
            int who = k < d ? data_member(geo, r, k) : holder(geo, r, k - d);
            bool ok = k < d ? have_data[who] : have_wrap[who];
            if (ok && k < d)
                chunk_of(data[who], dsizes[who], k, C, b[k]);
            else if (ok)
                memcpy(b[k], pchunk[who][k - d], C);
            gone[k] = !ok;
            if (!ok) {
                ngone++;
                if (who != lost) {
                    size_t ml = strlen(missing);
                    snprintf(missing + ml, sizeof missing - ml, "%s%s of node %u",
                             ml ? ", " : "", k < d ? "data" : "parity", geo->first + (uint32_t)who);
                }
            }
        }
        if (ngone > m) {
            rc = ftc_err_set(err, FTC_ERANGE,
                             "parity row %d of step %" PRIu64 " lost %d of %d pieces (code "
                             "tolerates %d): missing %s%s",
                             r, step, ngone, d + m, m, missing, notes);
            break;
        }
        if (ftc_parity_decode(code, b, gone, C, err)) {
            rc = err->code;
            break;
        }
        memcpy(res + (uint64_t)t * C, b[t], C);
    }
    if (!rc) {
        ftc_shard_view_t v;
        ftc_err_t e = {0};
        if (ftc_shard_open(&v, res, want, FTC_SHARD_VERIFY, &e) || v.head_xxh3 != want_head ||
            v.info.step != step)
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "the shard of node %u rebuilt from parity does not verify against "
                             "its recorded checksum: %s",
                             geo->first + (uint32_t)lost,
                             e.msg[0] ? e.msg : "head checksum or step differs");
    }
out:
    free(blk);
    ftc_parity_destroy(code);
    if (rc) {
        free(res);
        return rc;
    }
    *out = res;
    *out_size = want;
    return 0;
}

int ftc__par_store_local(const char *ns, uint32_t local, const uint8_t *wrap, uint64_t size,
                         ftc_err_t *err)
{
    /* write the slot that does not hold the newest wrapper (I3) */
    int target = 0;
    uint64_t newest = 0;
    bool any = false;
    char name[2][FTC_SLOT_NAME_MAX];
    for (int i = 0; i < 2; i++) {
        if (ftc_slot_name(ns, FTC_PAR_OWNER(local), i, name[i], sizeof name[i], err))
            return err->code;
        ftc_slot_t s;
        ftc_err_t e = {0};
        if (ftc_slot_open(name[i], false, &s, &e))
            continue;
        ftc_shard_view_t v;
        uint64_t total;
        if (ftc_shard_peek_size(s.base, s.size, &total, &e) == 0 && total <= s.size &&
            ftc_shard_open(&v, s.base, total, 0, &e) == 0 && (!any || v.info.step > newest)) {
            any = true;
            newest = v.info.step;
            target = 1 - i;
        }
        ftc_slot_close(&s);
    }
    ftc_slot_t s;
    if (ftc_slot_create(name[target], size, &s, err))
        return err->code;
    memcpy(s.base, wrap, size);
    ftc_slot_close(&s);
    return 0;
}

/* ---- gather ------------------------------------------------------------------ */

bool ftc__gather_poll(ftc_repl_t *r, ftc__gather_t *g, bool broken)
{
    bool all = true;
    uint64_t now = ftc_now_ns();
    for (int i = 0; i < g->n; i++) {
        ftc__gitem_t *it = &g->it[i];
        if (it->done)
            continue;
        if (it->started) {
            ftc_repl_status_t st;
            if (!broken && ftc_repl_status(r, it->x, &st) == 0 && st.done) {
                it->rc = st.rc;
                snprintf(it->detail, sizeof it->detail, "%s", st.detail);
                if (st.rc == 0)
                    ftc_repl_take(r, it->x, &it->buf, &it->size);
                ftc_repl_release(r, it->x);
                it->started = false;
                if (st.rc == 0) {
                    it->done = true;
                    continue;
                }
            } else if (broken) {
                it->started = false; /* the engine goes away with it */
                it->rc = FTC_EFABRIC;
                snprintf(it->detail, sizeof it->detail, "the fabric endpoint broke");
            } else {
                all = false;
                continue;
            }
            if (it->attempts >= g->max_attempts || ftc_deadline_expired(g->d)) {
                it->done = true;
                continue;
            }
            it->retry_ns = now + (uint64_t)g->retry_ms * 1000000ull;
        }
        all = false;
        if (broken || now < it->retry_ns)
            continue;
        if (ftc_deadline_expired(g->d)) {
            it->done = true;
            if (!it->rc) {
                it->rc = FTC_ETIMEDOUT;
                snprintf(it->detail, sizeof it->detail, "not started before the deadline");
            }
            continue;
        }
        it->attempts++;
        int rc = ftc_repl_fetch(r, it->peer, it->owner, g->step, g->d, &it->x);
        if (rc) {
            it->rc = rc;
            snprintf(it->detail, sizeof it->detail, "%s", ftc_repl_errstr(r));
            if (it->attempts >= g->max_attempts)
                it->done = true;
            else
                it->retry_ns = now + (uint64_t)g->retry_ms * 1000000ull;
            continue;
        }
        it->started = true;
    }
    if (all)
        for (int i = 0; i < g->n; i++)
            if (!g->it[i].done)
                all = false;
    return all;
}

void ftc__gather_free(ftc__gather_t *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->it[i].buf);
    free(g);
}
