#!/usr/bin/env bash
# Session 18, run 2: first TMA run. Accuracy through the CLI (check uses attention(): the _tma twin), then
# same-run A/B of QATTN_TMA=0 vs the default (_tma) with the prefill benchmark.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export QATTN_LOG=info
for c in "64:" "64: causal" "128: causal gqa=4"; do d=${c%%:*}; extra=${c#*:}
  for shape in "b=1,hq=8,hkv=8,q=1000,kv=1000" "b=2,hq=8,hkv=8,q=4097,kv=4097" "b=1,hq=8,hkv=8,q=17,kv=63"; do
    [[ $extra == *gqa* ]] && shape=${shape/hkv=8/hkv=2}
    timeout 60 $B/bin/qattn run --spec "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=$d$extra smooth=kv" --shape $shape --repeats 3 --no-tune --no-cache 2>&1 | grep -E "accuracy|error|kernel|tma" | head -4
  done
done
timeout 60 $B/bin/qattn run --spec "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=kv" --shape b=1,hq=4,hkv=4,q=3000,kv=3000 --layout bhsd --repeats 3 --no-tune --no-cache 2>&1 | grep -E "accuracy|error" | head -3
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in 1 2; do for tma in 0 1; do
  extra=""; [[ $r == 1 && $tma == 0 ]] && extra="sdpa_flash,"
  QATTN_TMA=$tma timeout 200 bash bench/run_h100.sh $B --tune off --variants ${extra}qattn_int8_per_token --d 64,128 --n 4096 --out /tmp/r${r}_$tma > /tmp/r${r}_$tma.log 2>&1 || { echo "r$r tma=$tma failed"; tail -5 /tmp/r${r}_$tma.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/r${r}_$tma/prefill_*.md | sed "s/^/r$r tma=$tma /" | cut -d'|' -f1-8,11,12,14
done; done
for r in 1 2; do for tma in 0 1; do echo "=== r$r tma=$tma"; cat /tmp/r${r}_$tma/prefill_*.md; done; done > $OUT/s18_run2_all.md 2>&1
