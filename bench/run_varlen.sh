#!/usr/bin/env bash
# On the GPU machine, from the repository root with a built build/: a ragged prefill batch as one varlen
# call, as separate calls and padded (qattn_bench_varlen: the default mix, the same mix over a 2048-token
# cached prefix, and eight equal 1024-token sequences), then the quantization passes of this build beside
# those of another (BASE_BENCH_QUANT, a qattn_bench_quant of the commit before the varlen passes), twice,
# interleaved. Writes into $OUT (default: ./varlen_out). bench/results/2026-11-28_varlen_h100/ holds one run.
set -u
OUT=${OUT:-varlen_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.csv
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
build/bin/qattn_bench_varlen --out $OUT/varlen_mix.json
build/bin/qattn_bench_varlen --prefix 2048 --out $OUT/varlen_mix_prefix2048.json
build/bin/qattn_bench_varlen --lengths 1024,1024,1024,1024,1024,1024,1024,1024 --out $OUT/varlen_equal_1024x8.json
if [ -n "${BASE_BENCH_QUANT:-}" ]; then
  for r in 1 2; do
    $BASE_BENCH_QUANT --b 4 --h 32 --n 4096 --d 128 --iters 20 --out $OUT/quant_base_$r.json
    build/bin/qattn_bench_quant --b 4 --h 32 --n 4096 --d 128 --iters 20 --out $OUT/quant_new_$r.json
  done
fi
