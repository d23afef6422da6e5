#!/usr/bin/env bash
# What a cold compile costs, through the qattn CLI alone (so any build of qattn can be measured, old or
# new): each spec of bench/cold_compile_specs.txt compiled once with no cache file, one process each,
# then the default grid of one arch. No GPU needed; NVRTC runs on the CPU.
#
#   bench/cold_compile.sh QATTN_BINARY OUT_DIR [ARCH=sm_90a] [JOBS=all cores]
#
# VARIANTS_ONLY=1 skips the grid.
# Writes OUT_DIR/variants.tsv (spec, kernel, wall/user/sys seconds of the process, compile_ms the tool
# reported), OUT_DIR/grid.json (the grid's rows) and OUT_DIR/summary.txt (medians, grid wall/user/sys
# seconds). Wall time depends on what else runs on the machine; user time much less: report both.
# Each qattn process gets an empty CUDA_CACHE_PATH of its own: where a driver is installed, NVRTC 12.9+
# (before qattn turned it off) kept compiles in the driver's compute cache and answered a repeated one
# from there, which is not a cold compile.
set -euo pipefail
qattn=${1:?usage: cold_compile.sh QATTN_BINARY OUT_DIR [ARCH] [JOBS]}
out=${2:?usage: cold_compile.sh QATTN_BINARY OUT_DIR [ARCH] [JOBS]}
arch=${3:-sm_90a}
jobs=${4:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export LC_ALL=C TIMEFORMAT='%R %U %S'

printf 'spec\tkernel\twall_s\tuser_s\tsys_s\tcompile_ms\n' >"$out/variants.tsv"
grep -v '^#' "$here/cold_compile_specs.txt" | grep -v '^$' | while IFS= read -r spec; do
  export CUDA_CACHE_PATH=$(mktemp -d)
  { time "$qattn" compile --spec "$spec" --arch "$arch" --no-cache --json >"$out/one.json"; } 2>"$out/one.time"
  rm -rf "$CUDA_CACHE_PATH"
  read -r wall user sys <"$out/one.time"
  row=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%s\t%.1f" % (j["kernel"], j["compile_ms"]))' "$out/one.json")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$spec" "${row%%$'\t'*}" "$wall" "$user" "$sys" "${row##*$'\t'}" | tee -a "$out/variants.tsv"
done
rm -f "$out/one.json" "$out/one.time"
summary() {
  python3 -c 'import csv,statistics as s,sys; r=list(csv.DictReader(open(sys.argv[1]),delimiter="\t")); m=lambda k: s.median(float(x[k]) for x in r); print("variants (%s, %d): median wall %.3f s, user %.3f s, sys %.3f s, tool-reported compile %.0f ms" % (sys.argv[2], len(r), m("wall_s"), m("user_s"), m("sys_s"), m("compile_ms")))' "$out/variants.tsv" "$arch"
}
if [ "${VARIANTS_ONLY:-0}" = 1 ]; then summary | tee "$out/summary.txt"; exit 0; fi

export CUDA_CACHE_PATH=$(mktemp -d)
{ time "$qattn" compile --grid default --arch "$arch" --no-cache --jobs "$jobs" --json >"$out/grid.json"; } 2>"$out/grid.time"
rm -rf "$CUDA_CACHE_PATH"
read -r gwall guser gsys <"$out/grid.time"
rm -f "$out/grid.time"

{ summary; python3 - "$out" "$arch" "$jobs" "$gwall" "$guser" "$gsys" <<'PY'; } | tee "$out/summary.txt"
import json, sys
out, arch, jobs, gwall, guser, gsys = sys.argv[1:]
grid = json.load(open(out + "/grid.json"))
failed = sum(not r["ok"] for r in grid)
print(f"grid default {arch}, --jobs {jobs}: {len(grid)} kernels ({failed} failed), wall {float(gwall):.2f} s, "
      f"user {float(guser):.2f} s, sys {float(gsys):.2f} s")
PY
