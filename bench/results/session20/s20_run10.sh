#!/usr/bin/env bash
# Session 20, run 10: the CLI on the H100 at the session's code: `qattn tune` then `qattn run` (the tuned
# winner from the cache) for issue 2's d 64 4k causal INT8 point and the d 128 4k causal FP8 P·V format.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
DB=/tmp/cli.db
for spec in "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv" "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=kv"; do
  case $spec in *d=64*) shape=b=4,hq=32,hkv=32,q=4096,kv=4096;; *) shape=b=4,hq=16,hkv=16,q=4096,kv=4096;; esac
  echo "=== qattn tune --spec \"$spec\" --shape $shape --db $DB"
  timeout 250 $B/bin/qattn tune --spec "$spec" --shape $shape --db $DB; echo "rc $?"
  echo "=== qattn run --spec \"$spec\" --shape $shape --db $DB"
  timeout 100 $B/bin/qattn run --spec "$spec" --shape $shape --db $DB; echo "rc $?"
done 2>&1 | tee $OUT/cli_tune_run_h100_2026-11-27.log
