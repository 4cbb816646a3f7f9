/* test_shard.c — placeholder, replaced below */
#include "ftc_test.h"
int main(void) { return 0; }
