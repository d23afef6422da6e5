"""Linear layers on the GPU: qattn's linear call (flow=auto: the tuned M1/M2 table when the cache holds
one, else the default rule; or one dataflow with --flow) against torch.matmul (cuBLAS) with fp16 weights,
in the same run on the same inputs, for the Llama-3-8B shapes and every M of the grid.

  python3 bench/bench_linear.py [--shapes qkv,o,gateup,down] [--m 1,2,4,...] [--formats fp16,int8,int4]
                                [--tune] [--out DIR]

Timing: CUDA events around each call, 5 untimed warm-ups, the median of 20 timed calls, rotating weight
copies so that no call finds its weights in L2 (cuBLAS gets the same rotation). Accuracy: qattn's C
against float64 A . W^T with the weights the kernel sees (rel L2). Writes results.json and results.md.
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import qattn  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gateup": (14336, 4096), "down": (4096, 14336)}
FORMATS = {"fp16": "fp16", "int8": "int8:per_channel", "int4": "int4:per_group"}
MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


def time_us(fn, copies, warmup=5, repeats=20):
    for i in range(warmup):
        fn(i % copies)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(repeats):
        start.record()
        fn(i % copies)
        stop.record()
        stop.synchronize()
        samples.append(1000.0 * start.elapsed_time(stop))
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qkv,o,gateup,down")
    ap.add_argument("--m", default=",".join(map(str, MS)))
    ap.add_argument("--formats", default="fp16,int8,int4")
    ap.add_argument("--tune", action="store_true", help="run Runtime.tune_linear per layer first (stored in the cache)")
    ap.add_argument("--cache", default=None, help="qattn cache file (default: the runtime's)")
    ap.add_argument("--out", default="bench_linear_out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    rt = qattn.Runtime(cache_path=args.cache) if args.cache else qattn.Runtime()
    l2 = 50 << 20
    for shape in args.shapes.split(","):
        n, k = SHAPES[shape]
        copies = max(2, (2 * l2) // (n * k * 2) + 1)
        w_f = [0.02 * torch.randn(n, k, device="cuda") for _ in range(copies)]
        w16 = [w.half() for w in w_f]
        for fmt_name in args.formats.split(","):
            fmt = FORMATS[fmt_name]
            spec = f"linear a=fp16 w={fmt} out=fp16 n={n} k={k}"
            packed = [qattn.pack_linear_weight(w, fmt) for w in w_f]
            if args.tune:
                rt.tune_linear(spec)
            for m in map(int, args.m.split(",")):
                a = torch.randn(m, k, device="cuda").half()
                c = torch.empty(m, n, device="cuda", dtype=torch.float16)
                name, flow, splits = rt.linear_route(spec, a, packed[0][0], c, w_scale=packed[0][1], w_zero=packed[0][2])

                def run_qattn(i):
                    pw, scale, zero = packed[i]
                    rt.linear(spec, a, pw, c, w_scale=scale, w_zero=zero)

                def run_cublas(i):
                    torch.matmul(a, w16[i].T)

                us_q = time_us(run_qattn, copies)
                us_t = time_us(run_cublas, copies)
                run_qattn(0)
                ref = a.double() @ qattn.unpack_linear_weight(*packed[0], fmt).T
                rel = ((c.double() - ref).norm() / ref.norm()).item()
                row = {"shape": shape, "n": n, "k": k, "format": fmt_name, "m": m, "flow": flow, "splits": splits,
                       "kernel": name, "qattn_us": us_q, "cublas_fp16_us": us_t, "speedup": us_t / us_q, "rel_l2": rel}
                rows.append(row)
                print(f"{shape:6s} {fmt_name:4s} m={m:5d} {flow:4s} s{splits:<2d} qattn {us_q:9.2f} us  cuBLAS {us_t:9.2f} us  "
                      f"x{us_t / us_q:5.2f}  relL2 {rel:.1e}", flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("| shape | format | M | flow | splits | qattn us | cuBLAS fp16 us | speedup | rel L2 |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['shape']} | {r['format']} | {r['m']} | {r['flow']} | {r['splits']} | {r['qattn_us']:.2f} | "
                    f"{r['cublas_fp16_us']:.2f} | {r['speedup']:.2f} | {r['rel_l2']:.1e} |\n")


if __name__ == "__main__":
    main()
