/*
 * test_safetensors.c — ftc_safetensors_export against an independent reader.
 *
 * Shards with every dtype, a 0-d tensor, empty tensors and metadata records
 * are exported; the file is re-read here with a minimal parser (jansson) and
 * every byte, shape, dtype and offset is compared with the shard; the
 * multi-shard prefixes, duplicate names and the crash-safety of the write
 * (fault injection) are checked; finally Python's `safetensors` (and numpy)
 * load the file and compare CRC-32s of every tensor computed here. Python's
 * packages are installed by scripts/setup: their absence is a failure.
 */
#include "ftc_test.h"

#include "core/fsio.h"
#include "plugins/safetensors.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>

/* ---- fixtures ------------------------------------------------------------------- */

typedef struct tdesc {
    const char *name;
    int dtype;
    uint32_t ndim;
    uint64_t shape[3];
    const char *st; /* safetensors dtype */
} tdesc_t;

static const tdesc_t all_dtypes[] = {
    {"w.f32", FTC_DTYPE_F32, 2, {3, 4}, "F32"},
    {"w.bf16", FTC_DTYPE_BF16, 1, {5}, "BF16"},
    {"w.f16", FTC_DTYPE_F16, 3, {2, 2, 2}, "F16"},
    {"q.i8", FTC_DTYPE_I8, 1, {7}, "I8"},
    {"empty.u8", FTC_DTYPE_U8, 1, {0}, "U8"},
    {"scalar.i32", FTC_DTYPE_I32, 0, {0}, "I32"},
    {"counts.i64", FTC_DTYPE_I64, 2, {2, 3}, "I64"},
    {"empty2d.f32", FTC_DTYPE_F32, 2, {0, 5}, "F32"},
    {"bytes.u8", FTC_DTYPE_U8, 1, {13}, "U8"},
};
#define N_ALL ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* Numpy has no bfloat16: the numpy cross-check uses shards without it. */
static const tdesc_t numpy_dtypes[] = {
    {"a.f32", FTC_DTYPE_F32, 2, {4, 3}, "F32"},  {"b.f16", FTC_DTYPE_F16, 1, {6}, "F16"},
    {"c.i8", FTC_DTYPE_I8, 1, {5}, "I8"},        {"d.u8", FTC_DTYPE_U8, 1, {0}, "U8"},
    {"e.i32", FTC_DTYPE_I32, 0, {0}, "I32"},     {"f.i64", FTC_DTYPE_I64, 2, {1, 2}, "I64"},
};
#define N_NP ((int)(sizeof numpy_dtypes / sizeof numpy_dtypes[0]))

static uint8_t *make_shard(const tdesc_t *td, int n, uint32_t dp_rank, uint32_t dp,
                           uint64_t seed, uint64_t *size)
{
    ftc_shard_info_t in = ftc_test_info(42, dp_rank);
    in.dp = dp;
    in.generation = 7;
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    assert_non_null(l);
    ftc_err_t err = {0};
    for (int i = 0; i < n; i++)
        assert_true(ftc_shard_layout_add_tensor(l, td[i].name, td[i].dtype, td[i].ndim,
                                                td[i].ndim ? td[i].shape : NULL, &err) >= 0);
    uint64_t cursor = 123456789ull + dp_rank;
    uint8_t rng[16];
    ftc_test_fill(rng, sizeof rng, seed);
    assert_int_equal(ftc_shard_layout_add_meta(l, "data.cursor", &cursor, 8, &err), 0);
    assert_int_equal(ftc_shard_layout_add_meta(l, "rng", rng, sizeof rng, &err), 0);
    assert_int_equal(ftc_shard_layout_add_meta(l, "empty", NULL, 0, &err), 0);
    *size = ftc_shard_layout_size(l);
    uint8_t *r = malloc(*size);
    assert_non_null(r);
    assert_int_equal(ftc_shard_layout_write(l, r, *size, &err), 0);
    for (int i = 0; i < n; i++) {
        uint64_t len = ftc_dtype_size(td[i].dtype);
        for (uint32_t d = 0; d < td[i].ndim; d++)
            len *= td[i].shape[d];
        ftc_test_fill(ftc_shard_payload_ptr(l, r, (uint32_t)i), len, seed * 100 + (uint64_t)i);
    }
    assert_int_equal(ftc_shard_seal(r, *size, 1, &err), 0);
    ftc_shard_layout_destroy(l);
    return r;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    uint8_t *buf = NULL;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fs_read_file(path, 1u << 30, &buf, len, &err), 0);
    return buf;
}

static void hexof(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
    out[2 * n] = '\0';
}

/* ---- the independent reader ------------------------------------------------------ */

/* Parses path as safetensors and checks it against the views: header length
 * and padding, every tensor's dtype, shape, offsets (back to back, no gaps)
 * and bytes, and the metadata. prefixed: names carry "dX.tY.pZ/". */
static void check_file(const char *path, const ftc_shard_view_t *views, int n,
                       const tdesc_t *td, bool prefixed)
{
    size_t len;
    uint8_t *buf = read_all(path, &len);
    assert_true(len >= 8);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    assert_true(8 + hl <= len);
    assert_int_equal((8 + hl) % 8, 0);
    assert_int_equal(buf[8], '{');
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, hl, 0, &je);
    if (!root)
        fail_msg("header JSON does not parse: %s (line %d)", je.text, je.line);
    const uint8_t *data = buf + 8 + hl;
    uint64_t data_len = len - 8 - hl;

    /* metadata */
    json_t *meta = json_object_get(root, "__metadata__");
    assert_true(json_is_object(meta));
    const char *k;
    json_t *val;
    json_object_foreach(meta, k, val) assert_true(json_is_string(val));
    assert_string_equal(json_string_value(json_object_get(meta, "job")), "test-job");
    assert_string_equal(json_string_value(json_object_get(meta, "step")), "42");
    assert_string_equal(json_string_value(json_object_get(meta, "generation")), "7");
    char want[64];
    snprintf(want, sizeof want, "%u", views[0].info.dp);
    assert_string_equal(json_string_value(json_object_get(meta, "dp")), want);
    assert_string_equal(json_string_value(json_object_get(meta, "tp")), "1");
    assert_string_equal(json_string_value(json_object_get(meta, "pp")), "1");
    if (!prefixed) {
        snprintf(want, sizeof want, "%u", views[0].info.dp_rank);
        assert_string_equal(json_string_value(json_object_get(meta, "dp_rank")), want);
    }
    for (int s = 0; s < n; s++) {
        char pre[32] = "";
        if (prefixed)
            snprintf(pre, sizeof pre, "d%u.t0.p0/", views[s].info.dp_rank);
        uint64_t pos = 0;
        const char *mk;
        uint32_t kl, vl;
        const uint8_t *mv;
        int records = 0;
        while (ftc_shard_meta_next(&views[s], &pos, &mk, &kl, &mv, &vl)) {
            char key[300], hex[256];
            snprintf(key, sizeof key, "%smeta.%.*s", pre, (int)kl, mk);
            hexof(mv, vl, hex);
            json_t *j = json_object_get(meta, key);
            if (!j)
                fail_msg("metadata key %s missing", key);
            assert_string_equal(json_string_value(j), hex);
            records++;
        }
        assert_int_equal(records, 3);
    }

    /* tensors: in order, back to back, bytes equal */
    int count = 0;
    uint64_t expect_off = 0;
    for (int s = 0; s < n; s++) {
        for (uint32_t i = 0; i < views[s].n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&views[s], i, &t);
            char name[300];
            snprintf(name, sizeof name, "%s%.*s", "", (int)t.name_len, t.name);
            if (prefixed)
                snprintf(name, sizeof name, "d%u.t0.p0/%.*s", views[s].info.dp_rank,
                         (int)t.name_len, t.name);
            json_t *e = json_object_get(root, name);
            if (!json_is_object(e))
                fail_msg("tensor %s missing from the header", name);
            assert_int_equal(json_object_size(e), 3);
            assert_string_equal(json_string_value(json_object_get(e, "dtype")), td[i].st);
            json_t *shape = json_object_get(e, "shape");
            assert_true(json_is_array(shape));
            assert_int_equal(json_array_size(shape), td[i].ndim);
            for (uint32_t d = 0; d < td[i].ndim; d++)
                assert_int_equal(json_integer_value(json_array_get(shape, d)), td[i].shape[d]);
            json_t *offs = json_object_get(e, "data_offsets");
            assert_int_equal(json_array_size(offs), 2);
            uint64_t b = (uint64_t)json_integer_value(json_array_get(offs, 0));
            uint64_t end = (uint64_t)json_integer_value(json_array_get(offs, 1));
            assert_int_equal(b, expect_off);
            assert_int_equal(end - b, t.length);
            assert_true(end <= data_len);
            assert_memory_equal(data + b, t.data, t.length);
            expect_off = end;
            count++;
        }
    }
    assert_int_equal(expect_off, data_len); /* no trailing bytes */
    assert_int_equal(json_object_size(root), (size_t)count + 1);
    json_decref(root);
    free(buf);
}

/* ---- tests ------------------------------------------------------------------------ */

static char *tmpdir;

static void test_single_shard_all_dtypes(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = make_shard(all_dtypes, N_ALL, 1, 4, 3, &size);
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/one.safetensors", tmpdir);
    int rc = ftc_safetensors_export(&v, 1, path, NULL, &err);
    if (rc)
        fail_msg("export: %s", ftc_err_str(&err));
    check_file(path, &v, 1, all_dtypes, false);
    free(r);
}

static void test_multi_shard_prefixes(void **state)
{
    (void)state;
    uint64_t s0, s1;
    uint8_t *r0 = make_shard(all_dtypes, N_ALL, 0, 2, 5, &s0);
    uint8_t *r1 = make_shard(all_dtypes, N_ALL, 1, 2, 6, &s1);
    ftc_shard_view_t v[2];
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&v[0], r0, s0, 0, &err), 0);
    assert_int_equal(ftc_shard_open(&v[1], r1, s1, 0, &err), 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/two.safetensors", tmpdir);
    assert_int_equal(ftc_safetensors_export(v, 2, path, NULL, &err), 0);
    check_file(path, v, 2, all_dtypes, true);

    /* the same coordinates twice: names would collide, which must be refused */
    ftc_shard_view_t dup[2] = {v[0], v[0]};
    char bad[PATH_MAX];
    snprintf(bad, sizeof bad, "%s/dup.safetensors", tmpdir);
    assert_int_equal(ftc_safetensors_export(dup, 2, bad, NULL, &err), FTC_EEXIST);
    assert_non_null(strstr(ftc_err_str(&err), "appears twice"));
    assert_int_not_equal(access(bad, F_OK), 0);
    free(r0);
    free(r1);
}

/* Counts the files in tmpdir whose name contains s. */
static int count_files(const char *s)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, s))
            n++;
    closedir(d);
    return n;
}

static void test_crash_safe_write(void **state)
{
    (void)state;
#ifndef FTC_FAULT_INJECTION
    skip(); /* a build without the fault hooks cannot inject the failures */
#endif
    uint64_t size;
    uint8_t *r = make_shard(all_dtypes, N_ALL, 0, 1, 9, &size);
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/keep.safetensors", tmpdir);
    assert_int_equal(ftc_safetensors_export(&v, 1, path, NULL, &err), 0);
    size_t len0;
    uint8_t *before = read_all(path, &len0);
    /* every write, fsync and rename failing in turn leaves the old file whole
     * and no temp file behind */
    const char *specs[] = {"write:1", "write:3", "fsync:1", "rename:1", "write:2,enospc"};
    uint64_t s2;
    uint8_t *r2 = make_shard(all_dtypes, N_ALL, 0, 1, 10, &s2);
    ftc_shard_view_t v2;
    assert_int_equal(ftc_shard_open(&v2, r2, s2, 0, &err), 0);
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        ftc_fault_t f;
        assert_int_equal(ftc_fault_parse(&f, specs[i], &err), 0);
        int rc = ftc_safetensors_export(&v2, 1, path, &f, &err);
        assert_true(rc < 0);
        assert_non_null(strstr(ftc_err_str(&err), "keep.safetensors"));
        size_t len1;
        uint8_t *after = read_all(path, &len1);
        assert_int_equal(len0, len1);
        assert_memory_equal(before, after, len0);
        free(after);
        assert_int_equal(count_files(".tmp."), 0);
    }
    /* and without a fault the new content replaces the old */
    assert_int_equal(ftc_safetensors_export(&v2, 1, path, NULL, &err), 0);
    check_file(path, &v2, 1, all_dtypes, false);
    free(before);
    free(r);
    free(r2);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *r = make_shard(all_dtypes, 2, 0, 1, 1, &size);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), 0);
    assert_int_equal(ftc_safetensors_export(&v, 0, "/tmp/x.safetensors", NULL, &err), FTC_EINVAL);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/", tmpdir);
    assert_int_equal(ftc_safetensors_export(&v, 1, path, NULL, &err), FTC_EINVAL);
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tmpdir);
    assert_true(ftc_safetensors_export(&v, 1, path, NULL, &err) < 0);
    assert_non_null(strstr(ftc_err_str(&err), "no/such/dir"));
    free(r);
}

/* ---- Python's safetensors ------------------------------------------------------------ */

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/* Runs the project's Python (FTC_PYTHON, set by ctest to the .venv that
 * scripts/setup makes; python3 otherwise) with a script; returns its status. */
static int run_python(const char *script, const char *arg1, const char *arg2)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *py = getenv("FTC_PYTHON");
        if (!py || access(py, X_OK) != 0)
            py = "python3";
        execlp(py, py, "-c", script, arg1, arg2, (char *)NULL);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* name dtype shape(comma) crc32 per line, what the Python side must see */
static void write_expect(const char *path, const ftc_shard_view_t *v, const tdesc_t *td)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        fprintf(f, "%.*s %s ", (int)t.name_len, t.name, td[i].st);
        for (uint32_t d = 0; d < t.ndim; d++)
            fprintf(f, "%s%llu", d ? "," : "", (unsigned long long)t.shape[d]);
        fprintf(f, "%s %u\n", t.ndim ? "" : "-", crc32_of(t.data, t.length));
    }
    fclose(f);
}

static const char py_check[] =
    "import sys, zlib\n"
    "import numpy as np\n"
    "import safetensors\n"
    "from safetensors import deserialize\n"
    "path, expect = sys.argv[1], sys.argv[2]\n"
    "want = {}\n"
    "for line in open(expect):\n"
    "    name, dt, shape, crc = line.split()\n"
    "    want[name] = (dt, [] if shape == '-' else [int(x) for x in shape.split(',')], int(crc))\n"
    "got = dict(deserialize(open(path, 'rb').read()))\n"
    "assert set(got) == set(want), (sorted(got), sorted(want))\n"
    "for name, (dt, shape, crc) in want.items():\n"
    "    t = got[name]\n"
    "    assert t['dtype'] == dt, (name, t['dtype'], dt)\n"
    "    assert list(t['shape']) == shape, (name, t['shape'], shape)\n"
    "    assert zlib.crc32(bytes(t['data'])) == crc, name\n"
    "if 'numpy' in path:\n"
    "    from safetensors.numpy import load_file\n"
    "    arrs = load_file(path)\n"
    "    np_dt = {'F32': np.float32, 'F16': np.float16, 'I8': np.int8, 'U8': np.uint8,\n"
    "             'I32': np.int32, 'I64': np.int64}\n"
    "    for name, (dt, shape, crc) in want.items():\n"
    "        a = arrs[name]\n"
    "        assert a.dtype == np_dt[dt], (name, a.dtype)\n"
    "        assert list(a.shape) == shape, (name, a.shape)\n"
    "        assert zlib.crc32(np.ascontiguousarray(a).tobytes()) == crc, name\n"
    "print('python safetensors', safetensors.__version__, 'read', len(want), 'tensors')\n";

static void test_python_safetensors(void **state)
{
    (void)state;
    if (run_python("import safetensors, numpy", NULL, NULL) != 0)
        fail_msg("python3 cannot import safetensors and numpy: run scripts/setup (it pip-installs "
                 "them), or `python3 -m pip install safetensors numpy`");
    const struct {
        const tdesc_t *td;
        int n;
        const char *file;
    } cases[] = {{all_dtypes, N_ALL, "py-all.safetensors"},
                 {numpy_dtypes, N_NP, "py-numpy.safetensors"}};
    for (int c = 0; c < 2; c++) {
        uint64_t size;
        uint8_t *r = make_shard(cases[c].td, cases[c].n, 0, 1, 11 + (uint64_t)c, &size);
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), 0);
        char path[PATH_MAX], expect[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", tmpdir, cases[c].file);
        snprintf(expect, sizeof expect, "%s/%s.expect", tmpdir, cases[c].file);
        assert_int_equal(ftc_safetensors_export(&v, 1, path, NULL, &err), 0);
        write_expect(expect, &v, cases[c].td);
        assert_int_equal(run_python(py_check, path, expect), 0);
        free(r);
    }
}

/* Threads of one process exporting to the same path at once: each call has
 * a temp file of its own, so every export succeeds and the file is always
 * one whole export (they shared ".NAME.tmp.PID" and truncated or renamed
 * away each other's). */
typedef struct {
    const ftc_shard_view_t *v;
    const char *path;
    int fails;
    char msg[FTC_ERR_MSG_MAX];
} st_job_t;

static void *export_loop(void *arg)
{
    st_job_t *j = arg;
    for (int i = 0; i < 40; i++) {
        ftc_err_t err = {0};
        if (ftc_safetensors_export(j->v, 1, j->path, NULL, &err) != 0) {
            j->fails++;
            snprintf(j->msg, sizeof j->msg, "%s", ftc_err_str(&err));
        }
    }
    return NULL;
}

static void test_threads_same_path(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = make_shard(all_dtypes, N_ALL, 0, 1, 5, &size);
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/shared.safetensors", tmpdir);
    st_job_t j[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        j[i] = (st_job_t){.v = &v, .path = path};
        assert_int_equal(pthread_create(&t[i], NULL, export_loop, &j[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        if (j[i].fails)
            fail_msg("thread %d: %d of 40 exports failed, last: %s", i, j[i].fails, j[i].msg);
    }
    check_file(path, &v, 1, all_dtypes, false);
    assert_int_equal(count_files(".tmp."), 0); /* no temp file left */
    free(r);
}

static int setup(void **state)
{
    (void)state;
    tmpdir = ftc_test_tmpdir("safetensors");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ftc_test_rmrf(tmpdir);
    free(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_shard_all_dtypes),
        cmocka_unit_test(test_multi_shard_prefixes),
        cmocka_unit_test(test_crash_safe_write),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_threads_same_path),
        cmocka_unit_test(test_python_safetensors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
