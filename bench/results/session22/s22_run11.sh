#!/usr/bin/env bash
# Session 22, run 11, at the final commit (the gate's per_tensor floor): the main job, and qattn run on
# the main job's per_tensor spec.
set -o pipefail
B=dev/carry/build
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 200 $B/examples/qattn_example_llama3_layer > $L/main_job.log 2>&1; echo "main job rc $?"; grep -E "prefill|decode" $L/main_job.log | grep -E "PASS|FAIL" | cut -c1-160
timeout 120 $B/bin/qattn run --spec "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 causal gqa=4 smooth=k" --shape b=1,hq=32,hkv=8,q=4096,kv=4096 --no-cache > $L/cli_run_per_tensor.log 2>&1; echo "run rc $?"; cat $L/cli_run_per_tensor.log
tar -C /tmp -czf $OUT/logs.tgz logs
