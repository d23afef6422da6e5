#!/usr/bin/env bash
# Configures and builds qattn into build/ (Release). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="${CUDA_HOME:-/usr/local/cuda}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" "$@" >/dev/null
cmake --build build -j"$(nproc)"
