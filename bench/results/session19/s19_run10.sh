#!/usr/bin/env bash
# Session 19, run 10: issue 2's benchmark at the session's last code (same run as SDPA), the main job, and
# the CLI's run (prepared call, TMA maps encoded once) on the d 64 causal INT8 point.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export QATTN_BENCH_CACHE=/tmp/qb.db
timeout 240 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,sdpa_cudnn,qattn_fp16,qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/i2 > /tmp/i2.log 2>&1 || tail -5 /tmp/i2.log
cp /tmp/i2/prefill_*.md $OUT/prefill_issue2.md; cp /tmp/i2/prefill_*.json $OUT/prefill_issue2.json
grep -E "\| (kernel|sdpa) \|" $OUT/prefill_issue2.md | cut -d'|' -f2-11
timeout 200 $B/examples/qattn_example_llama3_layer > $OUT/main_job.log 2>&1; echo "main job rc=$?"; tail -12 $OUT/main_job.log
timeout 120 $B/bin/qattn run --spec "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv" --shape b=4,hq=32,hkv=32,q=4096,kv=4096 --no-tune > $OUT/cli_run.log 2>&1; echo "cli run rc=$?"; tail -6 $OUT/cli_run.log
