#!/usr/bin/env bash
# Session 20, run 1: the head-group overlap probe (dev/carry/overlap_probe.py).
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=$PWD/dev/carry/build
export QATTN_LIBRARY=$B/lib/libqattn.so LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64 QATTN_BENCH_CACHE=/tmp/qb.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
timeout 520 python3 dev/carry/overlap_probe.py 2>&1 | tee $OUT/overlap_probe.log
