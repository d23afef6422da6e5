#!/usr/bin/env bash
# Command 1 of the README: install what is missing, build, and run the main job (the kernels of a
# Llama-3-8B-like attention layer: tuned and timed on a GPU, compiled into the cache without one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec ./build/examples/qattn_example_llama3_layer "$@"
