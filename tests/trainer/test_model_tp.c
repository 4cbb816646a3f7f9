/*
 * test_model_tp.c — tensor parallelism of the GPT (trainer/model.h) between
 * real processes: 2 or 4 forked TP ranks, each with its own libfabric
 * endpoint and a trainer/coll.h communicator, the model's all-reduce being
 * ftc_model_coll_allreduce. Against the TP = 1 model of the same seed, built
 * in every rank:
 *
 *   - the slicing rule: slices tile the full tensors, the TP = t weights are
 *     the TP = 1 weights' slices bit for bit, bad degrees are refused;
 *   - one forward/backward, TP = 2 and TP = 4 (tiny: 4 heads): loss within
 *     1e-5 relative; every tensor's gradient, gathered to full shape, within
 *     TOL_GRAD x its largest element; the replicated tensors' gradients and
 *     the TP gradient norm bit-identical on every rank;
 *   - 4 AdamW steps on each rank's slices: parameters within TOL_PARAM
 *     (absolute; Adam turns gradient noise into up to lr per step), the
 *     replicated ones bit-identical across the TP ranks;
 *   - a TP = 2 run repeated is bit-identical (loss, parameters, gradients);
 *   - TP = 2 gradients against central finite differences (both ranks
 *     perturb a replicated element; only the owner a split one);
 *   - a TP peer SIGKILLed: the survivor's forward returns an error by the
 *     all-reduce deadline (+ the fabric's cancel bound, + slack), sticky.
 *
 * Only fp32 summation order differs between TP = t and TP = 1 (the row-
 * parallel layers' partial sums are added by the all-reduce), so the
 * tolerances are a few fp32 ulps amplified through the network; the values
 * seen are printed. Usage: test_trainer_model_tp tcp|shm [filter]; exits 77
 * only when the provider is absent.
 */
#include "ftc_test.h"
#include "fabric_test.h"

#include "core/clock.h"
#include "core/fabric.h"
#include "trainer/coll.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/rng.h"

#include <rdma/fabric.h>

#include <math.h>
#include <signal.h>
#include <sys/wait.h>

#define TOL_LOSS 1e-5   /* relative */
#define TOL_GRAD 1e-5   /* of the tensor's largest |gradient| */
/* absolute, after STEPS AdamW steps at lr 1e-3: 2.5% of lr x STEPS, the
 * most Adam can move a weight. Looser than the gradients: Adam's first
 * updates are about lr x sign(g), so an element whose gradient is at fp32
 * noise level moves by up to lr either way (seen: about 1e-5). */
#define TOL_PARAM 1e-4
#define AR_TIMEOUT_MS 20000
#define KILL_DL_MS 2000
#define CANCEL_MS 500

static const char *g_prov;

/* ---- ranks: forked processes, one communicator each ---------------------- */

typedef struct rank_ctx {
    ftc_coll_t *coll;
    ftc_model_coll_ctx_t ar; /* the model's all-reduce context */
    int rank, size;
} rank_ctx_t;

/* A rank function; it destroys its models only after the communicator
 * (which may still reference their buffers after a failure, coll.h), so it
 * calls rank_leave() itself before freeing them. */
typedef void (*rank_fn)(rank_ctx_t *rc, void *arg);

static void rank_leave(rank_ctx_t *rc)
{
    ftc_coll_destroy(rc->coll);
    rc->coll = NULL;
}

static ftc_coll_t *join(const char *dir, int rank, int n)
{
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = g_prov;
    fo.cancel_timeout_ms = CANCEL_MS;
    ftc_fabric_t *fab = NULL;
    ftc_err_t err = {0};
    ftc_coll_t *c = NULL;
    uint8_t me[FTC_FABRIC_ADDR_MAX], addrs[4 * FTC_FABRIC_ADDR_MAX];
    size_t melen = sizeof me, lens[4];
    if (ftc_fabric_open(&fo, &fab, &err) < 0 || ftc_fabric_getname(fab, me, &melen) < 0 ||
        ftc_coll_exchange_dir(dir, rank, n, me, melen, addrs, lens, ftc_deadline_in_ms(30000),
                              &err) < 0 ||
        ftc_coll_cpu_create(fab, rank, n, addrs, lens, NULL, &c, &err) < 0) {
        fprintf(stderr, "rank %d: joining the TP group: %s\n", rank, err.msg);
        _exit(1);
    }
    return c;
}

/* Forks n (<= 4) ranks running fn; their wait statuses in st[]. */
static void spawn(int n, rank_fn fn, void *arg, int *st)
{
    char *dir = ftc_test_tmpdir("model_tp");
    pid_t pids[4];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_kernels_cpu_set_threads(1); /* n ranks on a 2-core machine */
            rank_ctx_t rc = {join(dir, r, n), {NULL, AR_TIMEOUT_MS}, r, n};
            rc.ar.coll = rc.coll;
            fn(&rc, arg);
            rank_leave(&rc);
            exit(0); /* not _exit: lets LeakSanitizer check the rank */
        }
    }
    ftc_test_reap_ranks(pids, n, st, dir, g_prov);
    free(dir);
}

static void expect_all_ok(int n, const int *st)
{
    for (int r = 0; r < n; r++) {
        if (!WIFEXITED(st[r]) || WEXITSTATUS(st[r]) != 0)
            print_error("rank %d: status 0x%x\n", r, st[r]);
        assert_true(WIFEXITED(st[r]));
        assert_int_equal(WEXITSTATUS(st[r]), 0);
    }
}

/* ---- helpers ------------------------------------------------------------- */

static ftc_model_config_t tiny(void)
{
    ftc_model_config_t c;
    ftc_err_t err = {0};
    CHILD_CHECK(ftc_model_preset("tiny", &c, &err) == 0);
    return c;
}

static void batch(uint64_t seed, int n, int V, int32_t *tok, int32_t *tg)
{
    ftc_rng_t r;
    ftc_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)ftc_rng_below(&r, (uint64_t)V);
        tg[i] = (int32_t)ftc_rng_below(&r, (uint64_t)V);
    }
}

static ftc_model_t *make_tp(rank_ctx_t *rc, const ftc_model_config_t *c, int B, int T,
                            uint64_t seed)
{
    ftc_err_t err = {0};
    ftc_model_t *m = ftc_model_create_tp(c, ftc_kernels_cpu(), B, T, seed, rc->rank, rc->size,
                                         ftc_model_coll_allreduce, &rc->ar, &err);
    if (!m)
        fprintf(stderr, "rank %d: %s\n", rc->rank, err.msg);
    CHILD_CHECK(m);
    return m;
}

/* buf (one of the TP model's buffers: params or grads) gathered into the full
 * layout of the TP = 1 model, on every rank: each rank writes its slices
 * (rank 0 the replicated tensors) into a zeroed full buffer, and the group
 * sums it (x + 0 = x exactly). */
static float *gather_full(rank_ctx_t *rc, const ftc_model_t *m, const float *buf)
{
    const ftc_model_config_t *c = ftc_model_config(m);
    ftc_model_tensor_t full[FTC_MODEL_NTENSORS];
    CHILD_CHECK(ftc_model_tensors_of(c, 1, full, NULL) == 0);
    size_t n = ftc_model_param_count(c);
    float *out = calloc(n, sizeof *out);
    CHILD_CHECK(out);
    const ftc_model_tensor_t *t = ftc_model_tensors(m);
    const ftc_model_tp_split_t *sp = ftc_model_tp_splits(m);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        if (!sp[i].replicated || rc->rank == 0)
            ftc_model_tp_to_full(&sp[i], buf + t[i].offset, out + full[i].offset);
    CHILD_CHECK(ftc_coll_all_reduce(rc->coll, out, n, FTC_COLL_F32,
                                    ftc_deadline_in_ms(AR_TIMEOUT_MS)) == 0);
    return out;
}

/* The replicated tensors of buf are the same bits on every rank: rank 0's
 * copy broadcast and compared. */
static void check_replicated_same(rank_ctx_t *rc, const ftc_model_t *m, const float *buf,
                                  const char *what)
{
    const ftc_model_tensor_t *t = ftc_model_tensors(m);
    const ftc_model_tp_split_t *sp = ftc_model_tp_splits(m);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        if (!sp[i].replicated)
            continue;
        float *x = malloc(t[i].numel * sizeof *x);
        CHILD_CHECK(x);
        memcpy(x, buf + t[i].offset, t[i].numel * sizeof *x);
        CHILD_CHECK(ftc_coll_broadcast(rc->coll, x, t[i].numel, FTC_COLL_F32, 0,
                                 ftc_deadline_in_ms(AR_TIMEOUT_MS)) == 0);
        if (memcmp(x, buf + t[i].offset, t[i].numel * sizeof *x)) {
            fprintf(stderr, "rank %d: replicated %s %s differs from rank 0's\n", rc->rank, what,
                    t[i].name);
            _exit(1);
        }
        free(x);
    }
}

/* Per tensor of the full layout: max |a - b| <= tol * scale, where scale is
 * the tensor's largest |b| (rel) or 1 (absolute). Returns the worst ratio of
 * error to scale. */
static double compare_full(const ftc_model_config_t *c, const float *a, const float *b, double tol,
                           bool rel, const char *what)
{
    ftc_model_tensor_t t[FTC_MODEL_NTENSORS];
    CHILD_CHECK(ftc_model_tensors_of(c, 1, t, NULL) == 0);
    double worst = 0;
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        double maxb = 0, maxe = 0;
        for (size_t j = 0; j < t[i].numel; j++) {
            maxb = fmax(maxb, fabs(b[t[i].offset + j]));
            maxe = fmax(maxe, fabs((double)a[t[i].offset + j] - b[t[i].offset + j]));
        }
        double scale = rel ? maxb : 1.0;
        double ratio = scale > 0 ? maxe / scale : maxe;
        worst = fmax(worst, ratio);
        if (ratio > tol) {
            fprintf(stderr, "%s %s: max |TP - TP1| %.3g, scale %.3g: ratio %.3g > %.3g\n", what,
                    t[i].name, maxe, scale, ratio, tol);
            _exit(1);
        }
    }
    return worst;
}

/* ---- the slicing rule and the initialization (no communication) ---------- */

static int no_allreduce(void *ctx, float *buf, size_t n)
{
    (void)ctx, (void)buf, (void)n;
    return FTC_EINVAL; /* never called: nothing here runs forward */
}

static void test_split_and_init(void **state)
{
    (void)state;
    ftc_model_config_t c = tiny();
    ftc_err_t err = {0};
    ftc_model_t *ref = ftc_model_create(&c, ftc_kernels_cpu(), 1, 8, 42, &err);
    assert_non_null(ref);
    assert_int_equal(ftc_model_tp(ref, NULL), 1);
    size_t nfull = ftc_model_num_params(ref);
    ftc_model_tensor_t full[FTC_MODEL_NTENSORS];
    assert_int_equal(ftc_model_tensors_of(&c, 1, full, NULL), 0);
    const int degrees[] = {2, 4};
    for (int di = 0; di < 2; di++) {
        int tp = degrees[di];
        float *rebuilt = calloc(nfull, sizeof *rebuilt);
        size_t nrep = 0, nsplit = 0; /* elements: replicated, split (all ranks) */
        for (int r = 0; r < tp; r++) {
            ftc_model_t *m = ftc_model_create_tp(&c, ftc_kernels_cpu(), 1, 8, 42, r, tp,
                                                 no_allreduce, NULL, &err);
            assert_non_null(m);
            int rk = -1;
            assert_int_equal(ftc_model_tp(m, &rk), tp);
            assert_int_equal(rk, r);
            assert_int_equal(ftc_model_num_params(m), ftc_model_param_count_tp(&c, tp));
            const ftc_model_tensor_t *t = ftc_model_tensors(m);
            const ftc_model_tp_split_t *sp = ftc_model_tp_splits(m);
            const float *p = ftc_model_params(m);
            for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
                ftc_model_tp_split_t s;
                assert_int_equal(ftc_model_tp_split(&c, r, tp, i, &s, &err), 0);
                assert_memory_equal(&s, &sp[i], sizeof s);
                assert_int_equal(s.outer * s.local * s.inner, t[i].numel);
                assert_int_equal(s.outer * s.full * s.inner, full[i].numel);
                assert_int_equal(s.full_numel, full[i].numel);
                assert_memory_equal(s.full_shape, full[i].shape, sizeof s.full_shape);
                if (s.replicated)
                    nrep += t[i].numel;
                else
                    nsplit += t[i].numel;
                /* the weights are the TP = 1 weights' slices, bit for bit */
                float *want = malloc(t[i].numel * sizeof *want);
                ftc_model_tp_from_full(&s, ftc_model_params(ref) + full[i].offset, want);
                assert_memory_equal(want, p + t[i].offset, t[i].numel * sizeof *want);
                free(want);
                if (!s.replicated || r == 0)
                    ftc_model_tp_to_full(&s, p + t[i].offset, rebuilt + full[i].offset);
            }
            ftc_model_destroy(m);
        }
        /* the slices tile the full tensors exactly once */
        assert_int_equal(nrep / (size_t)tp + nsplit, nfull);
        assert_memory_equal(rebuilt, ftc_model_params(ref), nfull * sizeof *rebuilt);
        free(rebuilt);
    }
    /* qkv: rank 1 of 2 holds heads 2, 3: q rows 32..63, k rows 96..127, v 160..191 */
    ftc_model_tp_split_t s;
    assert_int_equal(ftc_model_tp_split(&c, 1, 2, 4, &s, &err), 0);
    assert_int_equal(s.outer, 3 * 2);
    assert_int_equal(s.start, 32);
    assert_int_equal(s.local, 32);
    /* refused: 3 does not divide 4 heads; rank out of range; no all-reduce */
    assert_null(ftc_model_create_tp(&c, ftc_kernels_cpu(), 1, 8, 1, 0, 3, no_allreduce, NULL,
                                    &err));
    assert_int_equal(err.code, FTC_EINVAL);
    assert_non_null(strstr(err.msg, "divide the 4 heads"));
    assert_null(ftc_model_create_tp(&c, ftc_kernels_cpu(), 1, 8, 1, 2, 2, no_allreduce, NULL,
                                    &err));
    assert_int_equal(err.code, FTC_EINVAL);
    assert_null(ftc_model_create_tp(&c, ftc_kernels_cpu(), 1, 8, 1, 0, 2, NULL, NULL, &err));
    assert_int_equal(err.code, FTC_EINVAL);
    assert_non_null(strstr(err.msg, "all-reduce callback"));
    assert_int_equal(ftc_model_tp_split(&c, 0, 3, 4, &s, &err), FTC_EINVAL);
    assert_int_equal(ftc_model_tp_split(&c, 0, 2, 16, &s, &err), FTC_EINVAL);
    assert_int_equal(ftc_model_tensors_of(&c, 3, full, &err), FTC_EINVAL);
    assert_int_equal(ftc_model_tensors_of(&c, 0, full, &err), FTC_EINVAL);
    assert_int_equal(ftc_model_param_count_tp(&c, 3), 0);
    ftc_model_destroy(ref);
}

/* ---- TP = t against TP = 1 ----------------------------------------------- */

enum { VB = 2, VT = 32, STEPS = 4 };

static void vs_tp1(rank_ctx_t *rc, void *arg)
{
    (void)arg;
    ftc_model_config_t c = tiny();
    ftc_err_t err = {0};
    ftc_model_t *m = make_tp(rc, &c, VB, VT, 7);
    ftc_model_t *ref = ftc_model_create(&c, ftc_kernels_cpu(), VB, VT, 7, &err);
    CHILD_CHECK(ref);
    int32_t tok[VB * VT], tg[VB * VT];
    batch(1, VB * VT, c.vocab, tok, tg);
    /* one forward/backward */
    ftc_model_zero_grad(m);
    ftc_model_zero_grad(ref);
    float loss = NAN;
    CHILD_CHECK(ftc_model_fwd(m, tok, tg, &loss) == 0);
    CHILD_CHECK(ftc_model_bwd(m) == 0);
    float lref = ftc_model_forward(ref, tok, tg);
    ftc_model_backward(ref);
    double lrel = fabs((double)loss - lref) / lref;
    CHILD_CHECK(lrel <= TOL_LOSS);
    check_replicated_same(rc, m, ftc_model_grads(m), "gradient");
    float *g = gather_full(rc, m, ftc_model_grads(m));
    double grel = compare_full(&c, g, ftc_model_grads(ref), TOL_GRAD, true, "gradient");
    free(g);
    double norm = 0, nref = 0, norm0;
    CHILD_CHECK(ftc_model_grad_norm(m, &norm) == 0);
    CHILD_CHECK(ftc_model_grad_norm(ref, &nref) == 0);
    CHILD_CHECK(nref == ftc_grad_norm(ftc_model_grads(ref), ftc_model_num_params(ref)));
    CHILD_CHECK(fabs(norm - nref) <= 1e-5 * nref);
    norm0 = norm;
    CHILD_CHECK(ftc_coll_broadcast(rc->coll, &norm0, 2, FTC_COLL_F32, 0,
                             ftc_deadline_in_ms(AR_TIMEOUT_MS)) == 0); /* a double as 2 floats */
    CHILD_CHECK(memcmp(&norm0, &norm, sizeof norm) == 0);
    /* AdamW steps on each rank's slices (no clipping: ftc_adamw_step's norm
     * is the local one) */
    ftc_optim_config_t oc = FTC_OPTIM_CONFIG_INIT;
    oc.grad_clip = 0.0f;
    oc.warmup = 1;
    ftc_adamw_t *a = ftc_adamw_create(ftc_model_num_params(m), &err);
    ftc_adamw_t *aref = ftc_adamw_create(ftc_model_num_params(ref), &err);
    CHILD_CHECK(a && aref);
    for (int s = 0; s < STEPS; s++) {
        if (s > 0) {
            batch(100 + (uint64_t)s, VB * VT, c.vocab, tok, tg);
            ftc_model_zero_grad(m);
            ftc_model_zero_grad(ref);
            CHILD_CHECK(ftc_model_fwd(m, tok, tg, &loss) == 0);
            CHILD_CHECK(ftc_model_bwd(m) == 0);
            ftc_model_forward(ref, tok, tg);
            ftc_model_backward(ref);
        }
        ftc_adamw_step(a, m, &oc, (uint64_t)s, NULL, NULL);
        ftc_adamw_step(aref, ref, &oc, (uint64_t)s, NULL, NULL);
    }
    check_replicated_same(rc, m, ftc_model_params(m), "parameter");
    float *p = gather_full(rc, m, ftc_model_params(m));
    double perr = compare_full(&c, p, ftc_model_params(ref), TOL_PARAM, false, "parameter");
    free(p);
    if (rc->rank == 0)
        printf("  TP=%d vs TP=1: loss rel %.2g, gradients max %.2g x max|g|, norm rel %.2g; "
               "after %d AdamW steps parameters max |diff| %.2g\n",
               rc->size, lrel, grel, fabs(norm - nref) / nref, STEPS, perr);
    rank_leave(rc);
    ftc_adamw_destroy(a);
    ftc_adamw_destroy(aref);
    ftc_model_destroy(m);
    ftc_model_destroy(ref);
}

static void test_tp2_vs_tp1(void **s)
{
    (void)s;
    int st[4];
    spawn(2, vs_tp1, NULL, st);
    expect_all_ok(2, st);
}

static void test_tp4_vs_tp1(void **s)
{
    (void)s;
    int st[4];
    spawn(4, vs_tp1, NULL, st);
    expect_all_ok(4, st);
}

/* ---- a TP = 2 run repeated: the same bits ------------------------------- */

static void run_steps(rank_ctx_t *rc, float *losses, float **params, float **grads)
{
    ftc_model_config_t c = tiny();
    ftc_err_t err = {0};
    ftc_model_t *m = make_tp(rc, &c, VB, VT, 9);
    ftc_adamw_t *a = ftc_adamw_create(ftc_model_num_params(m), &err);
    CHILD_CHECK(a);
    ftc_optim_config_t oc = FTC_OPTIM_CONFIG_INIT;
    oc.grad_clip = 0.0f;
    int32_t tok[VB * VT], tg[VB * VT];
    size_t n = ftc_model_num_params(m);
    for (int s = 0; s < STEPS; s++) {
        batch(200 + (uint64_t)s, VB * VT, c.vocab, tok, tg);
        ftc_model_zero_grad(m);
        for (int micro = 0; micro < 2; micro++) /* accumulation too */
            CHILD_CHECK(ftc_model_fwd(m, tok, tg, &losses[2 * s + micro]) == 0 &&
                        ftc_model_bwd(m) == 0);
        ftc_adamw_step(a, m, &oc, (uint64_t)s, NULL, NULL);
    }
    *params = malloc(n * sizeof(float));
    *grads = malloc(n * sizeof(float));
    CHILD_CHECK(*params && *grads);
    memcpy(*params, ftc_model_params(m), n * sizeof(float));
    memcpy(*grads, ftc_model_grads(m), n * sizeof(float));
    ftc_adamw_destroy(a);
    ftc_model_destroy(m);
}

static void repeat(rank_ctx_t *rc, void *arg)
{
    (void)arg;
    float l1[2 * STEPS], l2[2 * STEPS], *p1, *p2, *g1, *g2;
    run_steps(rc, l1, &p1, &g1);
    run_steps(rc, l2, &p2, &g2);
    ftc_model_config_t c = tiny();
    size_t n = ftc_model_param_count_tp(&c, rc->size);
    CHILD_CHECK(memcmp(l1, l2, sizeof l1) == 0);
    CHILD_CHECK(memcmp(p1, p2, n * sizeof(float)) == 0);
    CHILD_CHECK(memcmp(g1, g2, n * sizeof(float)) == 0);
    if (rc->rank == 0)
        printf("  TP=2, %d steps twice: losses, parameters and gradients bit-identical "
               "(last loss %.6f)\n", STEPS, (double)l1[2 * STEPS - 1]);
    free(p1), free(p2), free(g1), free(g2);
}

static void test_tp2_repeat_bitwise(void **s)
{
    (void)s;
    int st[4];
    spawn(2, repeat, NULL, st);
    expect_all_ok(2, st);
}

/* ---- TP = 2 gradients against finite differences -------------------------- */

/* As test_model.c's gradient check: a small model, parameters from
 * U(-0.3, 0.3) (layernorm gains around 1), h = 1e-3; per tensor
 * |analytic - numeric| <= 0.05 |numeric| + 0.02 max|numeric|. The random
 * parameters are drawn in the full layout and sliced. */
static void gradcheck(rank_ctx_t *rc, void *arg)
{
    (void)arg;
    enum { B = 2, T = 6, NCK = 12 };
    ftc_model_config_t c = {23, 8, 2, 2, 8};
    ftc_err_t err = {0};
    ftc_model_t *ref = ftc_model_create(&c, ftc_kernels_cpu(), B, T, 5, &err);
    ftc_model_t *m = make_tp(rc, &c, B, T, 5);
    CHILD_CHECK(ref);
    float *pf = ftc_model_params(ref);
    ftc_rng_t r;
    ftc_rng_seed(&r, 99);
    for (size_t i = 0; i < ftc_model_num_params(ref); i++)
        pf[i] = (float)(ftc_rng_uniform(&r) * 0.6 - 0.3);
    const ftc_model_tensor_t *tf = ftc_model_tensors(ref), *t = ftc_model_tensors(m);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        if (strstr(tf[i].name, "ln") && tf[i].name[strlen(tf[i].name) - 1] == 'w')
            for (size_t j = 0; j < tf[i].numel; j++)
                pf[tf[i].offset + j] += 1.0f;
    int32_t tok[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)ftc_rng_below(&r, 23);
        tg[i] = (int32_t)ftc_rng_below(&r, 23);
    }
    const ftc_model_tp_split_t *sp = ftc_model_tp_splits(m);
    float *p = ftc_model_params(m);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        ftc_model_tp_from_full(&sp[i], pf + tf[i].offset, p + t[i].offset);
    ftc_model_destroy(ref);

    ftc_model_zero_grad(m);
    float loss;
    CHILD_CHECK(ftc_model_fwd(m, tok, tg, &loss) == 0 && ftc_model_bwd(m) == 0);
    CHILD_CHECK(isfinite(loss) && loss > 0);
    const float *g = ftc_model_grads(m);
    const float h = 1e-3f;
    int checked = 0;
    for (int ti = 0; ti < FTC_MODEL_NTENSORS; ti++) {
        int nck = t[ti].numel < NCK ? (int)t[ti].numel : NCK;
        /* a replicated element moves on every rank at once; a split one on
         * its owner only, each owner in turn (all ranks run every forward) */
        int owners = sp[ti].replicated ? 1 : rc->size;
        for (int q = 0; q < owners; q++) {
            bool mine = sp[ti].replicated || q == rc->rank;
            double num[NCK], ana[NCK], maxabs = 0;
            for (int k = 0; k < nck; k++) {
                size_t idx = t[ti].offset + (size_t)k * t[ti].numel / (size_t)nck;
                float keep = p[idx], fp, fm;
                if (mine)
                    p[idx] = keep + h;
                CHILD_CHECK(ftc_model_fwd(m, tok, tg, &fp) == 0);
                if (mine)
                    p[idx] = keep - h;
                CHILD_CHECK(ftc_model_fwd(m, tok, tg, &fm) == 0);
                p[idx] = keep;
                num[k] = ((double)fp - fm) / (2.0 * h);
                ana[k] = g[idx];
                maxabs = fmax(maxabs, fabs(num[k]));
            }
            if (!mine)
                continue;
            for (int k = 0; k < nck; k++) {
                if (fabs(ana[k] - num[k]) > 0.05 * fabs(num[k]) + 0.02 * maxabs) {
                    fprintf(stderr, "rank %d: %s element %d: analytic %.6g, numeric %.6g\n",
                            rc->rank, t[ti].name, k, ana[k], num[k]);
                    _exit(1);
                }
            }
            CHILD_CHECK(maxabs > 1e-4); /* every slice gets a gradient */
            checked += nck;
        }
    }
    if (rc->rank == 0)
        printf("  TP=2 gradient check: %d elements on rank 0 within 5%% + 2%% of max\n", checked);
    rank_leave(rc);
    ftc_model_destroy(m);
}

static void test_tp2_gradcheck(void **s)
{
    (void)s;
    int st[4];
    spawn(2, gradcheck, NULL, st);
    expect_all_ok(2, st);
}

/* ---- a TP peer killed ------------------------------------------------------ */

static void killed(rank_ctx_t *rc, void *arg)
{
    (void)arg;
    ftc_model_config_t c = tiny();
    rc->ar.timeout_ms = KILL_DL_MS;
    ftc_model_t *m = make_tp(rc, &c, VB, VT, 3);
    int32_t tok[VB * VT], tg[VB * VT];
    batch(3, VB * VT, c.vocab, tok, tg);
    float loss;
    CHILD_CHECK(ftc_model_fwd(m, tok, tg, &loss) == 0 && ftc_model_bwd(m) == 0);
    CHILD_CHECK(ftc_model_status(m, NULL) == 0);
    CHILD_CHECK(ftc_coll_barrier(rc->coll, ftc_deadline_in_ms(AR_TIMEOUT_MS)) == 0);
    if (rc->rank == 1)
        raise(SIGKILL);
    uint64_t t0 = ftc_now_ns();
    int rc0 = ftc_model_fwd(m, tok, tg, &loss);
    double ms = (double)(ftc_now_ns() - t0) / 1e6;
    ftc_err_t err = {0};
    CHILD_CHECK(ftc_model_status(m, &err) == rc0);
    printf("  rank 0: forward with the peer dead returned %d after %.0f ms (deadline %d ms): "
           "%s\n  (communicator: %s)\n",
           rc0, ms, KILL_DL_MS, err.msg, ftc_coll_errmsg(rc->coll));
    CHILD_CHECK(rc0 == FTC_ETIMEDOUT || rc0 == FTC_EFABRIC || rc0 == FTC_ECANCELED);
    CHILD_CHECK(isnan(loss));
    CHILD_CHECK(strstr(err.msg, "all-reduce") && strstr(err.msg, "layer 0"));
    /* the deadline, the cancel bound, and slack for a loaded machine */
    CHILD_CHECK(ms < KILL_DL_MS + CANCEL_MS + 5000);
    /* sticky: everything after fails at once with the same code */
    t0 = ftc_now_ns();
    CHILD_CHECK(ftc_model_bwd(m) == rc0);
    CHILD_CHECK(isnan(ftc_model_forward(m, tok, tg)));
    double norm;
    CHILD_CHECK(ftc_model_grad_norm(m, &norm) == rc0);
    CHILD_CHECK((double)(ftc_now_ns() - t0) / 1e6 < 1000);
    rank_leave(rc); /* before the model: the endpoint may hold its buffers */
    ftc_model_destroy(m);
}

static void test_tp2_killed_peer(void **s)
{
    (void)s;
    int st[4];
    spawn(2, killed, NULL, st);
    assert_true(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
    expect_all_ok(1, st);
}

int main(int argc, char **argv)
{
    g_prov = ftc_test_fabric_args(argc, argv);
    if (!g_prov)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_init),
        cmocka_unit_test(test_tp2_vs_tp1),
        cmocka_unit_test(test_tp4_vs_tp1),
        cmocka_unit_test(test_tp2_repeat_bitwise),
        cmocka_unit_test(test_tp2_gradcheck),
        cmocka_unit_test(test_tp2_killed_peer),
    };
    return cmocka_run_group_tests_name(g_prov, tests, NULL, NULL);
}
