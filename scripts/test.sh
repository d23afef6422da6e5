#!/usr/bin/env bash
# Command 2 of the README: build and run the test suite. CPU tests always; the GPU tests (label gpu)
# too when a CUDA driver is present (QATTN_GPU_TESTS=0 skips them). QATTN_TEST_LEVEL=2 compiles the full
# tiling sweep instead of the default tiling of each grid point.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh -DQATTN_TEST_LEVEL="${QATTN_TEST_LEVEL:-1}"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
labels="cpu"
if [ "${QATTN_GPU_TESTS:-1}" = 1 ] && ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then labels="cpu|gpu"; fi
ctest --test-dir build -L "$labels" -j"$(nproc)" --output-on-failure
