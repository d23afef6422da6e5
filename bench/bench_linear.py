"""Linear layers on the GPU: qattn's linear call (flow=auto: the tuned M1/M2 table when the cache holds
one, else the default rule; with --flows also each dataflow forced) against torch.matmul (cuBLAS) with
16-bit weights of the activations' type, in the same run on the same inputs, for the Llama-3-8B shapes
and every M of the grid.

  python3 bench/bench_linear.py [--shapes qkv,o,gateup,down] [--m 1,2,4,...] [--formats fp16,int8,int4]
                                [--flows auto,gemv,flat,gemm] [--act fp16|bf16] [--tune] [--cache F] [--out DIR]

Timing (GPU time of the call, as a layer inside a model's step sees it): the GPU is given a head start
(torch.cuda._sleep) and then every timed call is enqueued back to back, each between its own two
events, so the events hold the kernels and not the Python time of issuing them; 5 untimed warm-ups;
the median of 20; weight copies rotate so that no call finds its weights in L2 (cuBLAS gets the same
rotation). `call_us` is the older measure, an event pair around one call on an idle GPU: the call's
GPU time plus whatever host time the GPU waits for, i.e. what an eager Python call costs when nothing
else is queued. Accuracy: qattn's C against float64 A . W^T with the weights the kernel sees (rel L2).
Writes linear.json (meta: device, date, commit, command) and linear.md.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import qattn  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gateup": (14336, 4096), "down": (4096, 14336)}
FORMATS = {"fp16": "fp16", "int8": "int8:per_channel", "int4": "int4:per_group"}
MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
FLOWS = ("auto", "gemv", "flat", "gemm")
WARMUP, REPEATS = 5, 20


def weight_bytes(n, k, fmt_name):
    """Bytes a call must read for W (codes and their scales / zero points)."""
    if fmt_name == "int8":
        return n * k + 4 * n
    if fmt_name == "int4":
        return n * k // 2 + 2 * 4 * n * (k // 128)
    return 2 * n * k


def gpu_time_us(fn, copies):
    """Median GPU time of fn(i) over REPEATS calls, enqueued behind a head start (see the module text)."""
    for i in range(WARMUP):
        fn(i % copies)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPEATS)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(REPEATS)]
    torch.cuda._sleep(int(20e-3 * 2.0e9))   # ~20 ms at 2 GHz: far more than issuing 20 calls takes
    for i in range(REPEATS):
        starts[i].record()
        fn(i % copies)
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(1000.0 * s.elapsed_time(e) for s, e in zip(starts, stops))


def call_time_us(fn, copies):
    """Median of an event pair around one call on an idle GPU (host issue time included)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(REPEATS):
        torch.cuda.synchronize()
        start.record()
        fn(i % copies)
        stop.record()
        stop.synchronize()
        samples.append(1000.0 * start.elapsed_time(stop))
    return statistics.median(samples)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def markdown(meta, rows):
    out = [f"# Linear layers against cuBLAS: {meta['device']}", "",
           f"date {meta['date']}, commit `{meta['commit']}`, torch {meta['torch']}", "",
           f"command: `{meta['command']}`", "",
           "GPU time per call (median of 20, head start, rotating weights); speedup = cuBLAS / qattn; "
           "GB/s = weight bytes / qattn time; call_us: one eager call on an idle GPU.", "",
           f"activations and output {meta.get('act', 'fp16')}.", "",
           f"| shape | format | flow asked | M | flow run | splits | qattn us | cuBLAS {meta.get('act', 'fp16')} us | "
           "speedup | GB/s | "
           "call us (qattn / cuBLAS) | rel L2 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['shape']} | {r['format']} | {r['flow_asked']} | {r['m']} | – | – | – | – | – | – | – | "
                       f"{r['error'][:80]} |")
            continue
        out.append(f"| {r['shape']} | {r['format']} | {r['flow_asked']} | {r['m']} | {r['flow']} | {r['splits']} | "
                   f"{r['qattn_us']:.2f} | {r['cublas_fp16_us']:.2f} | {r['speedup']:.2f} | {r['gbps']:.0f} | "
                   f"{r['qattn_call_us']:.1f} / {r['cublas_call_us']:.1f} | {r['rel_l2']:.1e} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qkv,o,gateup,down")
    ap.add_argument("--m", default=",".join(map(str, MS)))
    ap.add_argument("--formats", default="fp16,int8,int4")
    ap.add_argument("--flows", default="auto", help="comma list of auto, gemv, flat, gemm")
    ap.add_argument("--tune", action="store_true", help="run Runtime.tune_linear per layer first (stored in the cache)")
    ap.add_argument("--cache", default=None, help="qattn cache file (default: the runtime's)")
    ap.add_argument("--act", default="fp16", choices=("fp16", "bf16"),
                    help="activation and output type; cuBLAS runs with weights of this type")
    ap.add_argument("--out", default="bench_linear_out")
    args = ap.parse_args()
    flows = args.flows.split(",")
    bad = [f for f in flows if f not in FLOWS]
    if bad:
        ap.error(f"--flows: unknown {bad}; accepted: {', '.join(FLOWS)}")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": git_commit(),
            "date": datetime.date.today().isoformat(), "act": args.act,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    rows = []
    rt = qattn.Runtime(cache_path=args.cache) if args.cache else qattn.Runtime()
    l2 = 50 << 20
    for shape in args.shapes.split(","):
        n, k = SHAPES[shape]
        copies = max(2, (2 * l2) // (n * k * 2) + 1)
        w_f = [0.02 * torch.randn(n, k, device="cuda") for _ in range(copies)]
        dtype = torch.float16 if args.act == "fp16" else torch.bfloat16
        w16 = [w.to(dtype) for w in w_f]
        for fmt_name in args.formats.split(","):
            fmt = args.act if fmt_name == "fp16" else FORMATS[fmt_name]   # 16-bit weights: the activations' type
            base = f"linear a={args.act} w={fmt} out={args.act} n={n} k={k}"
            packed = [qattn.pack_linear_weight(w, fmt) for w in w_f]
            if args.tune:
                rt.tune_linear(base)
            for m in map(int, args.m.split(",")):
                a = torch.randn(m, k, device="cuda").to(dtype)
                c = torch.empty(m, n, device="cuda", dtype=dtype)

                def run_cublas(i):
                    torch.matmul(a, w16[i].T)

                us_t = gpu_time_us(run_cublas, copies)
                call_t = call_time_us(run_cublas, copies)
                for flow in flows:
                    spec = base if flow == "auto" else f"{base} flow={flow}"
                    row = {"shape": shape, "n": n, "k": k, "format": fmt_name, "m": m, "flow_asked": flow}
                    try:
                        name, flow_run, splits = rt.linear_route(spec, a, packed[0][0], c, w_scale=packed[0][1],
                                                                 w_zero=packed[0][2])

                        def run_qattn(i):
                            pw, scale, zero = packed[i]
                            rt.linear(spec, a, pw, c, w_scale=scale, w_zero=zero)

                        us_q = gpu_time_us(run_qattn, copies)
                        call_q = call_time_us(run_qattn, copies)
                    except (RuntimeError, ValueError) as e:
                        row["error"] = str(e).splitlines()[0]
                        rows.append(row)
                        print(f"{shape:6s} {fmt_name:4s} {flow:4s} m={m:5d} error: {row['error'][:120]}", flush=True)
                        continue
                    c.fill_(float("nan"))
                    run_qattn(0)
                    ref = a.double() @ qattn.unpack_linear_weight(*packed[0], fmt).T
                    rel = ((c.double() - ref).norm() / ref.norm()).item()
                    row.update({"flow": flow_run, "splits": splits, "kernel": name, "qattn_us": us_q,
                                "cublas_fp16_us": us_t, "speedup": us_t / us_q,
                                "gbps": weight_bytes(n, k, fmt_name) / us_q / 1e3,
                                "qattn_call_us": call_q, "cublas_call_us": call_t, "rel_l2": rel})
                    rows.append(row)
                    print(f"{shape:6s} {fmt_name:4s} {flow:4s} m={m:5d} {flow_run:4s} s{splits:<2d} qattn {us_q:8.2f} us "
                          f"cuBLAS {us_t:8.2f} us  x{us_t / us_q:5.2f}  {row['gbps']:6.0f} GB/s  "
                          f"call {call_q:6.1f}/{call_t:6.1f} us  relL2 {rel:.1e}", flush=True)
            with open(os.path.join(args.out, "linear.json"), "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
            with open(os.path.join(args.out, "linear.md"), "w") as f:
                f.write(markdown(meta, rows))


if __name__ == "__main__":
    main()
