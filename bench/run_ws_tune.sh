#!/usr/bin/env bash
# On the GPU machine, from the repository root with a built build/: `qattn tune --no-cache` of prefill
# points whose candidates include the warp-specialized form (_ws) and its persistent launch (_ws_ps), so
# every form is compiled, gated and timed in one run; prints the best of each form per point. With
# SUITES=1 first the GPU suites (ctest -L gpu, the Python decode tests). Writes into $OUT (default
# ./ws_out); BUDGET (s, default 540) stops starting new points. bench/results/2026-11-27_warp_specialized_h100/
# and 2026-12-07_persistent_ws_*/ hold runs.
set -u
OUT=${OUT:-ws_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.csv
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
start=$(date +%s)
if [ "${SUITES:-0}" = 1 ]; then
  timeout 400 ctest --test-dir build -L gpu -j16 --timeout 380 -O $OUT/ctest_gpu.log --output-on-failure > /dev/null 2>&1
  echo "ctest rc=$? after $(( $(date +%s) - start )) s"
  grep -E "tests passed|Total Test time" $OUT/ctest_gpu.log
  grep -E "Test +#[0-9]+: " $OUT/ctest_gpu.log | grep -v " Passed" | head -20
  QATTN_LIBRARY=$PWD/build/lib/libqattn.so PYTHONPATH=$PWD/python timeout 90 python3 -m pytest -q python/tests/test_decode_gpu.py python/tests/test_decode_cpu.py 2>&1 | tail -3
fi
n=0
for spec in "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128|b=16,hq=32,hkv=32,q=1024" \
            "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal|b=16,hq=32,hkv=32,q=1024" \
            "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal|b=4,hq=32,hkv=32,q=4096" \
            "prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=128|b=1,hq=32,hkv=32,q=16384" \
            "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128|b=4,hq=32,hkv=32,q=4096" \
            "prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=64|b=1,hq=24,hkv=24,q=17776"; do
  n=$((n+1)); s=${spec%%|*}; sh=${spec##*|}
  [ $(( $(date +%s) - start )) -gt ${BUDGET:-540} ] && { echo "skip $s (time)"; continue; }
  timeout 90 build/bin/qattn tune --no-cache --spec "$s" --shape $sh > $OUT/tune_$n.txt 2>&1
  echo "== $s $sh rc=$?"; grep -E "^winner" $OUT/tune_$n.txt | cut -c1-120
  for form in "_ws_ps " "_ws "; do grep -E "$form" $OUT/tune_$n.txt | sort -k3 -n | head -1 | cut -c1-62; done
  grep -vE "_ws |_ws_ps |^winner" $OUT/tune_$n.txt | grep -E " (won|lost) " | sort -k3 -n | head -1 | cut -c1-62
done
echo "total $(( $(date +%s) - start )) s"
