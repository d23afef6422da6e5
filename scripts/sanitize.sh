#!/usr/bin/env bash
# The CPU suite under AddressSanitizer + UndefinedBehaviorSanitizer (docs/testing.md#sanitizers).
# Configures and builds build-asan/ with -DQATTN_SANITIZE=address,undefined (the library, the CLI and
# every test), then runs the tests labelled cpu there; any sanitizer report makes its test fail.
# Not part of CI (several times slower than the plain suite on a 2-core box); run it by hand.
# Extra arguments go to ctest (e.g. -R qattn_cache to run a subset). The log is build-asan/sanitize.log.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="${CUDA_HOME:-/usr/local/cuda}"
# -O0: the instrumented build of every test takes several times longer than the plain one at -O3; most
# of the suite's time is NVRTC (not instrumented), so the slower code costs little. No examples or
# benchmark programs: the suite does not run them.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" \
      -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O0 -DNDEBUG" \
      -DQATTN_BUILD_EXAMPLES=OFF -DQATTN_BUILD_BENCH=OFF \
      -DQATTN_SANITIZE=address,undefined -DQATTN_TEST_LEVEL="${QATTN_TEST_LEVEL:-1}" >/dev/null
cmake --build build-asan -j"$(nproc)"
export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# halt_on_error: the first report ends the program with a non-zero exit, which fails its test.
# detect_leaks: LeakSanitizer runs at every instrumented program's exit; the only suppressions are for
# libraries qattn does not build (tests/sanitize/lsan_suppressions.txt says why each is there).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan_suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# Left out: tests that build separate programs with the plain toolchain against the sanitized
# libqattn.so (the installed-package consumer, qattn as a subproject, README's quick starts). They check
# packaging, not memory safety; the library code they run is covered by the other tests.
excluded='^(package_install|package_subproject|docs_readme_quickstarts)$'
# QATTN_SANITIZE_SKIP_SWEEPS=1 also leaves out the NVRTC compile sweeps (every grid point or tiling
# compiled for several archs): most of the suite's time is spent inside NVRTC there, which is not
# instrumented, while the qattn code they run (rendering, the compiler wrapper) runs in smaller tests too.
if [ "${QATTN_SANITIZE_SKIP_SWEEPS:-0}" = 1 ]; then
  excluded="$excluded|QuantNvrtc\.|CompileGrid\.|FusedQCompile\.|TmaCompile\.Twins|FlashQKernels\.CompileForEveryArch"
fi
ctest --test-dir build-asan -L cpu -E "$excluded" -j"$(nproc)" --output-on-failure "$@" 2>&1 |
  tee build-asan/sanitize.log
