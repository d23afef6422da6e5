#!/usr/bin/env bash
# Session 22, run 10: the long-key tests after their shared code moved into the fixture (same checks),
# and their negative control again (a build whose exact-sum guard never fires).
set -o pipefail
B=dev/carry/build
L=/tmp/logs; mkdir -p $L
timeout 300 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/gpu_test_long_keys.log 2>&1 &
timeout 300 dev/carry/negctl/qattn_e2e_gpu_tests --gtest_filter='AttentionLongKeys.*' > $L/negative_control_long_keys_no_guard.log 2>&1 &
wait
for f in $L/*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|\[ metrics \]" $f | cut -c1-200; done
tar -C /tmp -czf $OUT/logs.tgz logs
