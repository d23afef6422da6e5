#!/usr/bin/env bash
# Session 22, run 5, at the final kernel code: the prefill GPU suites (e2e in 3 shards with the long-key
# test now at d 64 and 128, prefill_pv, prefill_int4, prefill_qsmooth, pretune, runtime), and the negative
# control of the long-row guard (a build whose exact-sum guard never fires: AttentionLongKeys must fail).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 540 $B/tests/e2e/qattn_e2e_gpu_tests > $L/gpu_test_e2e_shard$i.log 2>&1 & done
timeout 540 $B/tests/e2e/pretune_gpu_test > $L/gpu_test_pretune.log 2>&1 &
timeout 540 $B/tests/runtime/qattn_runtime_gpu_tests > $L/gpu_test_runtime.log 2>&1 &
timeout 540 $B/tests/e2e/prefill_pv_gpu_test > $L/gpu_test_prefill_pv.log 2>&1 &
timeout 540 $B/tests/e2e/prefill_int4_gpu_test > $L/gpu_test_prefill_int4.log 2>&1 &
timeout 540 $B/tests/e2e/prefill_qsmooth_gpu_test > $L/gpu_test_prefill_qsmooth.log 2>&1 &
timeout 300 dev/carry/negctl/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/negative_control_long_keys_no_guard.log 2>&1 &
wait
for f in $L/*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -8; done
grep -h "long keys" $L/gpu_test_e2e_shard*.log $L/negative_control_long_keys_no_guard.log
tar -C /tmp -czf $OUT/logs.tgz logs
