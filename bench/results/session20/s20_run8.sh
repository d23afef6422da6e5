#!/usr/bin/env bash
# Session 20, run 8, at the committed code (ac3566c: the lane choice in rt::pass_lanes): the new test,
# every quantized attention spec, the runtime tests and the main job; then issue 2's benchmark and issue
# 3's d 128 formats (FP8 P·V, INT8 per token) with the side-stream passes on (the default).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 400 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*:Kernels/AttentionVsReference.*qki*' > $OUT/gpu_test_final_attention.log 2>&1 &
timeout 400 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_final_runtime.log 2>&1 &
wait
for f in $OUT/gpu_test_final_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f; done
timeout 200 $B/examples/qattn_example_llama3_layer > $OUT/main_job.log 2>&1; echo "main job rc $?"; tail -12 $OUT/main_job.log
export PATH=/opt/torch/.venv/bin:$PATH QATTN_BENCH_CACHE=/tmp/qb8.db
timeout 200 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,sdpa_cudnn,qattn_fp16,qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/i2 > /tmp/i2.log 2>&1; cp /tmp/i2/prefill_*.md $OUT/prefill_issue2.md; cp /tmp/i2/prefill_*.json $OUT/prefill_issue2.json
timeout 200 bash bench/run_h100.sh $B --grid formats --tune off --variants sdpa_cudnn,qattn_int8_per_token,qattn_int8_fp8 --d 128 --n 4096,8192,16384 --out /tmp/i3 > /tmp/i3.log 2>&1; cp /tmp/i3/prefill_*.md $OUT/prefill_formats_d128.md; cp /tmp/i3/prefill_*.json $OUT/prefill_formats_d128.json
grep -E "\| (kernel|e2e|sdpa) \|" $OUT/prefill_issue2.md | cut -d'|' -f2-12
grep -E "\| (kernel|e2e|sdpa) \|" $OUT/prefill_formats_d128.md | cut -d'|' -f2-12
