#!/usr/bin/env bash
# Session 22, run 6, at the final code: the long-key tests (the new int32-range test and the uniform-row
# test, d 64 and 128), their negative control (a build whose exact-sum guard never fires), qattn tune /
# run on the d 64 4k causal INT8 point, and the main job.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 300 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/gpu_test_long_keys.log 2>&1 &
timeout 300 dev/carry/negctl/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/negative_control_long_keys_no_guard.log 2>&1 &
wait
for f in $L/*long_keys*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|\[ metrics \]" $f | head -30; done
S="prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv"
SH=b=4,hq=32,hkv=32,q=4096,kv=4096
{ timeout 200 $B/bin/qattn tune --spec "$S" --shape $SH --db /tmp/cli.db | tail -3; echo "tune rc $?"; timeout 100 $B/bin/qattn run --spec "$S" --shape $SH --db /tmp/cli.db; echo "run rc $?"; } > $L/cli_tune_run.log 2>&1
cat $L/cli_tune_run.log
timeout 200 $B/examples/qattn_example_llama3_layer > $L/main_job.log 2>&1; echo "main job rc $?"; grep -E "prefill|decode|PASS|FAIL" $L/main_job.log | head -20
tar -C /tmp -czf $OUT/logs.tgz logs
