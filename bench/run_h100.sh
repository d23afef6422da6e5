#!/usr/bin/env bash
# The one command for the prefill benchmark on the GPU machine.
#
#   bash bench/run_h100.sh [BUILD_DIR] [bench_prefill.py flags...]
#
# BUILD_DIR (default: build) holds lib/libqattn.so, built on the development machine and carried
# over. Results go to $OUT when set (the device machine's return folder), else bench/results/; the
# log goes next to them. The commit is taken from git, else from $QATTN_GIT_COMMIT.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
[[ $build = /* ]] || build=$repo/$build

export QATTN_LIBRARY=${QATTN_LIBRARY:-$build/lib/libqattn.so}
if [[ ! -f $QATTN_LIBRARY ]]; then
  echo "run_h100.sh: $QATTN_LIBRARY not found; build the library and carry the build folder" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$build/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$repo/python:$repo/bench${PYTHONPATH:+:$PYTHONPATH}
if [[ -z ${QATTN_GIT_COMMIT:-} ]]; then
  QATTN_GIT_COMMIT=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
  export QATTN_GIT_COMMIT
fi

out=${OUT:-$repo/bench/results}
mkdir -p "$out"
# A fresh cache per run unless --cache is given: the tuned winners then belong to this build.
cache_args=(--cache "${QATTN_BENCH_CACHE:-/tmp/qattn-bench-$$.db}")
for arg in "$@"; do
  if [[ $arg == --cache* ]]; then cache_args=(); fi
done

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv" 2>&1 || true
cd "$repo"
set +e
python3 bench/bench_prefill.py --out "$out" "${cache_args[@]}" "$@" 2>&1 | tee "$out/bench_prefill.log"
status=${PIPESTATUS[0]}
set -e
echo "run_h100.sh: bench_prefill.py exited with $status; results in $out"
exit "$status"
