#!/usr/bin/env bash
# Session 21, run 5: tuning now also compiles the winner's launch form (its _qf / _tma twin) into the
# cache. pretune_gpu_test's restart calls attention() on every prefill bucket and expects zero compiles;
# the same test built without that compile (negative control) must fail. Then the runtime GPU tests,
# qattn tune / run on the d 64 4k causal INT8 point, and the main job.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 300 $B/tests/e2e/pretune_gpu_test > $L/gpu_test_pretune.log 2>&1; echo "pretune_gpu_test rc $?"
timeout 300 dev/carry/var/nolaunch/pretune_gpu_test > $L/negative_control_pretune_no_launch_form.log 2>&1; echo "negative control (no launch-form compile) rc $?"
grep -E "Failure|compiles|Which is|Expected|^\[  (PASSED|FAILED)" $L/negative_control_pretune_no_launch_form.log | head -8
timeout 300 $B/tests/runtime/qattn_runtime_gpu_tests > $L/gpu_test_runtime.log 2>&1; echo "runtime rc $?"
S="prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv"
SH=b=4,hq=32,hkv=32,q=4096,kv=4096
{ timeout 200 $B/bin/qattn tune --spec "$S" --shape $SH --db /tmp/cli.db; echo "tune rc $?"; timeout 100 $B/bin/qattn run --spec "$S" --shape $SH --db /tmp/cli.db; echo "run rc $?"; timeout 60 $B/bin/qattn cache stats --db /tmp/cli.db; } > $L/cli_tune_run.log 2>&1
tail -8 $L/cli_tune_run.log
timeout 200 $B/examples/qattn_example_llama3_layer > $L/main_job.log 2>&1; echo "main job rc $?"; tail -6 $L/main_job.log
for f in $L/gpu_test_*.log $L/negative*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -6; done
tar -C /tmp -czf $OUT/logs.tgz logs
