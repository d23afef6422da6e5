#!/usr/bin/env bash
# Session 22, run 7, at the final code: the long-key tests (the int32-range test, now with one logit for
# every attended key) and their negative control; whether the per_tensor / per_tensor smooth=k kernel (the
# main job's row that measured cos 0.99464 < 0.995 in run 6) computes the same as the committed kernel on
# the same seeded inputs (bench harness, both libraries); the main job twice; issue 2's benchmark; ten
# rounds of the d 64 4k point (flash and the INT8 kernel alternating which runs first).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 300 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/gpu_test_long_keys.log 2>&1 &
timeout 300 dev/carry/negctl/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/negative_control_long_keys_no_guard.log 2>&1 &
wait
for f in $L/*long_keys*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|int32 range|Failure" $f | head -30; done
export PATH=/opt/torch/.venv/bin:$PATH
for lib in dev/carry/var/base dev/carry/build; do
  QATTN_LIBRARY=$lib/lib/libqattn.so PYTHONPATH=python:bench python3 -c "
import sys, bench_utils as bu, bench_prefill as bp
bu.QATTN_VARIANTS['qattn_int8_per_tensor_k'] = 'prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d={d}{causal} smooth=k'
sys.exit(bp.main(['--tune', 'off', '--variants', 'qattn_int8_per_tensor_k,qattn_int8_per_token', '--d', '64,128', '--n', '4096', '--out', '/tmp/pt_' + sys.argv[1], '--cache', '/tmp/pt_' + sys.argv[1] + '.db']))
" $(basename $lib) > $L/per_tensor_same_inputs_$(basename $lib).log 2>&1
  echo "== per_tensor check $lib rc $?"; grep -E "\| kernel \|" /tmp/pt_$(basename $lib)/prefill_*.md | cut -c1-220
done
for i in 1 2; do timeout 200 $B/examples/qattn_example_llama3_layer > $L/main_job_$i.log 2>&1; echo "main job $i rc $?"; grep -E "per_tensor|FAIL" $L/main_job_$i.log | head -5; done
tar -C /tmp -czf $OUT/logs.tgz logs
