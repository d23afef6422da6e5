#!/usr/bin/env bash
# Same code before and after a compile-speed change: each spec of bench/cold_compile_specs.txt compiled to
# a cubin by both qattn builds (no cache), sha256 compared; and, given two bench/cold_compile.sh result
# directories, every grid kernel's registers, spills and shared memory compared.
#
#   bench/cold_compile_compare.sh QATTN_BEFORE QATTN_AFTER [ARCH=sm_90a] [BEFORE_DIR AFTER_DIR]
#
# Prints one line per spec (SAME or DIFFERENT) and a last line with the counts; exit 1 on any difference.
set -euo pipefail
before=${1:?usage: cold_compile_compare.sh QATTN_BEFORE QATTN_AFTER [ARCH] [BEFORE_DIR AFTER_DIR]}
after=${2:?usage: cold_compile_compare.sh QATTN_BEFORE QATTN_AFTER [ARCH] [BEFORE_DIR AFTER_DIR]}
arch=${3:-sm_90a}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDA_CACHE_PATH=$tmp/nv
same=0 different=0
while IFS= read -r spec; do
  "$before" compile --spec "$spec" --arch "$arch" --no-cache --emit cubin --out "$tmp/b.cubin" >/dev/null
  "$after" compile --spec "$spec" --arch "$arch" --no-cache --emit cubin --out "$tmp/a.cubin" >/dev/null
  if cmp -s "$tmp/b.cubin" "$tmp/a.cubin"; then verdict=SAME; same=$((same + 1)); else verdict=DIFFERENT; different=$((different + 1)); fi
  echo "$verdict $(sha256sum <"$tmp/a.cubin" | cut -c1-16) $spec"
done < <(grep -v '^#' "$here/cold_compile_specs.txt" | grep -v '^$')
echo "cubins: $same same, $different different"
if [ $# -ge 5 ]; then
  python3 - "$4/grid.json" "$5/grid.json" <<'PY' || different=$((different + 1))
import json, sys
key = lambda r: (r["registers"], r["spill_bytes"], r["smem_bytes"])
b = {r["kernel"]: key(r) for r in json.load(open(sys.argv[1]))}
a = {r["kernel"]: key(r) for r in json.load(open(sys.argv[2]))}
diff = sorted(k for k in b.keys() | a.keys() if b.get(k) != a.get(k))
for k in diff: print("grid DIFFERENT", k, b.get(k), a.get(k))
print(f"grid: {len(a)} kernels, {len(diff)} with other registers/spills/smem")
sys.exit(1 if diff else 0)
PY
fi
[ "$different" = 0 ]
