"""GPU time of one linear dataflow per tiling and split count, beside cuBLAS, on the Llama-3-8B shapes.

  python3 bench/linear_tilings.py [--flow gemv|flat|gemm] [--shapes gateup,down] [--formats int4,int8]
                                  [--m 1] [--tilings bm1_bn16_w4_s2,...] [--splits 1,2] [--top 5]
                                  [--out FILE]

Where bench_linear.py measures what a call runs (the tuned or default choice), this shows how far the
choice is from the other tilings of one dataflow: a line per (shape, format, m) with the fastest
(tiling, splits) pairs, their GPU time and the weight bytes per second, after cuBLAS with fp16 weights
in the same process. Timing as in bench_linear.py (head start, queued calls, rotating weights). The
default --tilings are the GEMV's candidates at one token (generator/linear_tilings.cpp); a tiling the
runtime refuses for a format is reported and skipped.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import qattn  # noqa: E402
from bench_linear import FORMATS, SHAPES, gpu_time_us, weight_bytes  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flow", default="gemv", choices=("gemv", "flat", "gemm"))
    ap.add_argument("--shapes", default="gateup,down")
    ap.add_argument("--formats", default="int4,int8")
    ap.add_argument("--m", default="1")
    ap.add_argument("--tilings", default="bm1_bn16_w4_s2,bm1_bn16_w4_s4,bm1_bn8_w2_s4,bm1_bn4_w1_s4")
    ap.add_argument("--splits", default="1,2")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--out", default=None, help="also write the lines to this file")
    args = ap.parse_args()
    out = open(args.out, "w") if args.out else None

    def say(line):
        print(line, flush=True)
        if out:
            out.write(line + "\n")

    rt = qattn.Runtime()
    torch.manual_seed(1)
    for shape in args.shapes.split(","):
        n, k = SHAPES[shape]
        copies = max(2, (100 << 20) // (n * k // 2) + 1)
        w_f = [0.02 * torch.randn(n, k, device="cuda") for _ in range(copies)]
        w16 = [w.half() for w in w_f[:2]]
        for m in map(int, args.m.split(",")):
            a = torch.randn(m, k, device="cuda").half()
            us = gpu_time_us(lambda i: torch.matmul(a, w16[i % 2].T), 2)
            say(f"{shape} cuBLAS fp16 m={m}: {us:.1f} us, {2 * n * k / us / 1e3:.0f} GB/s")
        for fmt_name in args.formats.split(","):
            fmt = FORMATS[fmt_name]
            packed = [qattn.pack_linear_weight(w, fmt) for w in w_f] if fmt_name != "fp16" else \
                [(w.half(), None, None) for w in w_f]
            spec = f"linear a=fp16 w={fmt} out=fp16 n={n} k={k} flow={args.flow}"
            for m in map(int, args.m.split(",")):
                a = torch.randn(m, k, device="cuda").half()
                c = torch.empty(m, n, device="cuda", dtype=torch.float16)
                results = []
                for tiling in args.tilings.split(","):
                    for splits in map(int, args.splits.split(",")):
                        def call(i, tiling=tiling, splits=splits):
                            pw, scale, zero = packed[i]
                            rt.linear(spec, a, pw, c, w_scale=scale, w_zero=zero, splits=splits, tiling=tiling)
                        try:
                            results.append((gpu_time_us(call, copies), tiling, splits))
                        except (RuntimeError, ValueError) as e:
                            say(f"  {tiling} splits {splits}: {str(e).splitlines()[0][:100]}")
                results.sort()
                best = "  ".join(f"{t} s{s} {u:.1f} us {weight_bytes(n, k, fmt_name) / u / 1e3:.0f} GB/s"
                                 for u, t, s in results[:args.top])
                say(f"{shape} {fmt_name} m={m}: {best}")


if __name__ == "__main__":
    main()
