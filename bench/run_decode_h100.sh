#!/usr/bin/env bash
# The one command for the decode benchmark on the GPU machine.
#
#   bash bench/run_decode_h100.sh [BUILD_DIR] [bench_decode.py flags...]
#
# BUILD_DIR (default: build) holds bin/qattn_bench_decode and lib/libqattn.so, built on the development
# machine and carried over. Results go to $OUT when set (the device machine's return folder), else
# bench/results/; the log goes next to them. The commit is taken from git, else from $QATTN_GIT_COMMIT.
# $PYTHON picks the interpreter that has torch (default: python3).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
[[ $build = /* ]] || build=$repo/$build

bin=$build/bin/qattn_bench_decode
if [[ ! -x $bin || ! -f $build/lib/libqattn.so ]]; then
  echo "run_decode_h100.sh: $bin or $build/lib/libqattn.so not found; build the target qattn_bench_decode" \
       "(cmake --build build --target qattn_bench_decode) and carry the build folder" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$build/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [[ -z ${QATTN_GIT_COMMIT:-} ]]; then
  QATTN_GIT_COMMIT=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
  export QATTN_GIT_COMMIT
fi

# A fresh kernel cache per run: every binary compiled and tuned in it belongs to this build. The
# qattn_bench_decode runs of one benchmark share it, so each spec is compiled once.
QATTN_CACHE_DIR=$(mktemp -d /tmp/qattn-decode-cache.XXXXXX)
export QATTN_CACHE_DIR
trap 'rm -rf "$QATTN_CACHE_DIR"' EXIT

out=${OUT:-$repo/bench/results}
mkdir -p "$out"
log=$out/bench_decode_$(date -u +%Y-%m-%d_%H%M%S).log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu_decode.csv" 2>&1 || true
cd "$repo"
set +e
"${PYTHON:-python3}" bench/bench_decode.py --out "$out" --bin "$bin" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "run_decode_h100.sh: bench_decode.py exited with $status; results in $out, log $log"
exit "$status"
