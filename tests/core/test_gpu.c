/* test_gpu.c — the GPU probe: on a machine without a GPU a CUDA build must
 * report 0 devices with a reason, never crash (the CPU backend is chosen at
 * run time). With FTC_REQUIRE_GPU=1 (scripts/gpu-check) a device must exist. */
#include "ftc_test.h"

#include "core/gpu.h"

static void test_probe(void **state)
{
    (void)state;
    ftc_err_t why = {0};
    int n = ftc_gpu_count(&why);
    assert_true(n >= 0);
    if (n == 0) {
        assert_true(why.code < 0);
        assert_true(strlen(why.msg) > 0);
        print_message("no GPU: %s (CPU backend)\n", why.msg);
    } else {
        assert_true(ftc_gpu_built());
        print_message("%d GPU(s)\n", n);
    }
    const char *req = getenv("FTC_REQUIRE_GPU");
    if (req && !strcmp(req, "1"))
        assert_true(n > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
