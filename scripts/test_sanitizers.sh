#!/usr/bin/env bash
# Builds the CPU test suite (dt_unit_tests, and the `deltatune` CLI the run/kill/CLI tests start) with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs it (what CI runs after scripts/test.sh). Any
# memory error, leak or undefined behaviour aborts the test that hit it, so the stage fails.
# usage: scripts/test_sanitizers.sh [BUILD_DIR=build-asan] [extra cmake args...]
#
# Flags: -O2 keeps the model math of the training tests fast under ASan (at -O2 the slowest test,
# Train.DemoLossFallsClearly, takes ~150 s of its 600 s limit; -O1 would put it near the limit). -g1
# (line tables only) still gives file:line in every report but compiles markedly faster than -g
# (run_config.cpp: 39 s instead of 65 s), and the build is most of this stage's time.
# Every CPU test runs, no gtest filter: under ASan the whole suite takes ~3 min on 2 cores (measured:
# 172 tests, 188 s wall with --parallel 2), so a subset would save little. The build, measured with -g on
# a shared 2-core machine under heavy load, took ~49 CPU-minutes; -g1 and an idle CI machine should keep
# the stage around 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
shift || true
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DDT_CUDA=OFF -DDT_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DDT_SANITIZE=ON "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target dt_unit_tests deltatune
built=$(date +%s)

# halt_on_error: stop at the first report (UBSan is built with -fno-sanitize-recover as well).
# detect_leaks: LeakSanitizer at exit. Child processes (the CLI the tests start) inherit these.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
(cd "$build" && ctest -L cpu --output-on-failure --parallel "$(nproc)")
echo "sanitizers: build $((built - start)) s, tests $(($(date +%s) - built)) s"
