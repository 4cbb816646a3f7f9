# A thin wrapper over CMake: the two commands of the README, and a few more.
#
#   make demo    set-up, Release build, run the main job (scripts/demo: the
#                reference trainer on 4 simulated nodes, one killed, elastic
#                shrink, bit-identical weights; scripts/drill: node loss on
#                the in-memory store)
#   make test    set-up, build, the whole suite under ctest; again under
#                AddressSanitizer + UBSan; short libFuzzer runs
#   make drills  every chaos drill of scripts/drill: node loss, a corrupt
#                replica, a hung rank, and (as root) a network partition
#   make bench   the benchmarks (bench/), figures recorded in docs/benchmarks.md
#   make fuzz    long fuzzing runs (FUZZ_SECONDS per target, default 600)
#   make soak    long tests, only on request: scripts/soak (the main job
#                under 6 seeded faults: rank and node kills, a node's
#                return, hangs; FTC_SOAK_SEED replays one) and ctest -L soak
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
CTEST_FLAGS ?= --output-on-failure --no-tests=error
export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=1:protect_shadow_gap=0
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS ?= suppressions=$(CURDIR)/tests/lsan.supp

.PHONY: all setup build demo drills test test-release test-asan test-fuzz bench fuzz soak clean

all: build

setup:
	@bash scripts/setup

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo $(BUILD)
	bash scripts/drill $(BUILD)

drills: build
	bash scripts/drill $(BUILD)
	bash scripts/drill --corrupt $(BUILD)
	bash scripts/drill --hang $(BUILD)
	if [ "$$(id -u)" = 0 ]; then bash scripts/drill --partition $(BUILD); fi

test: setup test-release test-asan test-fuzz
	@echo "make test: release, sanitizer and fuzz suites passed"

test-release: build
	cd $(BUILD) && ctest -j $(JOBS) -LE 'soak|fuzz' $(CTEST_FLAGS)

test-asan: setup
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFTC_SANITIZE=address,undefined -DFTC_WITH_CUDA=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest -j $(JOBS) -LE 'soak|fuzz|nosan' $(CTEST_FLAGS)

test-fuzz: setup
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFTC_FUZZ=ON -DFTC_WITH_CUDA=OFF -DBUILD_TESTING=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target ftc_fuzz_targets
	cd $(FUZZ_BUILD) && ctest -j $(JOBS) -L fuzz $(CTEST_FLAGS)

bench: build
	$(BUILD)/bench/bench_persist
	$(BUILD)/bench/bench_recover

fuzz: setup
	bash scripts/fuzz $(FUZZ_SECONDS)

soak: build
	bash scripts/soak $(BUILD)
	cd $(BUILD) && ctest -L soak -E '^test_soak$$' $(CTEST_FLAGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
