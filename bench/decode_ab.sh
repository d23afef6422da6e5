#!/usr/bin/env bash
# Two builds of qattn_bench_decode on one GPU, interleaved (base, new, base, new ...), each with its own
# empty kernel cache, so a kernel change is measured against its baseline in the same run.
#
#   bash bench/decode_ab.sh BASE_BIN NEW_BIN ["decode spec"] [rounds] [shape ...]
#
# Prints one line per run: round, build, shape, exit status, median µs, GB/s on the bytes read, splits
# and the count of non-finite outputs (bench/README.md, "Decode benchmark", says how a call is timed).
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: bench/decode_ab.sh BASE_BIN NEW_BIN [\"decode spec\"] [rounds] [shape ...]" >&2
  exit 2
fi
base=$1 new=$2
spec=${3:-"decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4"}
rounds=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(b=8,hq=32,hkv=8,q=1,kv=131072 b=1,hq=32,hkv=8,q=1,kv=131072 b=8,hq=32,hkv=8,q=1,kv=32768)
for bin in "$base" "$new"; do
  [[ -x $bin ]] || { echo "decode_ab.sh: $bin is not an executable" >&2; exit 2; }
done
caches=$(mktemp -d /tmp/qattn-decode-ab.XXXXXX)
trap 'rm -rf "$caches"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  for which in base new; do
    bin=$base; [[ $which = new ]] && bin=$new
    for shape in "${shapes[@]}"; do
      out=$(QATTN_CACHE_DIR=$caches/$which "$bin" --spec "$spec" --shape "$shape" --iters 40 --flush-mb 256 2>/dev/null)
      rc=$?
      summary=$(printf '%s\n' "$out" | python3 -c '
import json, sys
line = [l for l in sys.stdin.read().splitlines() if l.startswith("{")][-1]
d = json.loads(line)
print("%.1f us %.0f GB/s splits %s nonfinite %s" % (d["median_us"], d["gbps"], d["splits"], d["non_finite"]))' 2>/dev/null)
      echo "$round $which $shape rc=$rc ${summary:-no result}"
    done
  done
done
