"""Per-call host overhead of qattn's PyTorch calls against F.scaled_dot_product_attention, same run.

Host time: the wall time of issuing R calls back to back (no synchronization inside the round) divided
by R, median over rounds; the GPU is idle at each round's start and R is small enough that the launch
queue never fills, so the number is the Python + C++ + driver launch cost of one call. GPU time: CUDA
events around the same R calls (bounded below by the host time when the host is the slower side).

    python3 bench/torch_overhead.py [--out DIR] [--b 1] [--n 128] [--h 32] [--d 128]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def measure(fn, rounds=30, per_round=50):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    host, gpu = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        host.append((t1 - t0) / per_round * 1e6)
        gpu.append(start.elapsed_time(end) / per_round * 1e3)
    return statistics.median(host), statistics.median(gpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--b", type=int, default=1)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--h", type=int, default=32)
    parser.add_argument("--hkv", type=int, default=8)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--label", default="", help="suffix of the result file name")
    args = parser.parse_args()
    import qattn
    import qattn.torch as qt
    from qattn import formats

    torch.manual_seed(0)
    q = torch.randn(args.b, args.n, args.h, args.d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(args.b, args.n, args.hkv, args.d, device="cuda", dtype=torch.float16) for _ in range(2))
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    rt = qt.runtime(torch.cuda.current_device())
    rows = []

    def add(name, fn):
        host, gpu = measure(fn)
        rows.append({"call": name, "host_us": round(host, 2), "gpu_us": round(gpu, 2)})
        print(f"{name:60s} host {host:7.2f} us   gpu {gpu:7.2f} us", flush=True)

    add("F.scaled_dot_product_attention (causal, enable_gqa)",
        lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True))
    for fmt in ("fp16", "int8", "auto"):
        spec = formats.prefill_spec(fmt, torch.cuda.get_device_capability(), args.d, "float16", True, args.h, args.hkv)
        add(f"qattn.torch.attention fmt={fmt}", lambda fmt=fmt: qt.attention(q, k, v, is_causal=True, fmt=fmt))
        add(f"qattn.torch.sdpa fmt={fmt} ([b, h, s, d])",
            lambda fmt=fmt: qt.sdpa(qh, kh, vh, is_causal=True, fmt=fmt))
        add(f"torch.ops.qattn.attention ({fmt}: {spec.split(' d=')[0][8:]})",
            lambda spec=spec: torch.ops.qattn.attention(q, k, v, spec, "bshd", 0.0))
        add(f"qattn.Runtime.attention ({fmt})", lambda spec=spec: rt.attention(q, k, v, spec))
    # Where the time goes (int8): the Python side alone (the C call stubbed), the plan's C call alone,
    # the kernel launch alone (Prepared.run: no quantization passes), and a CUDA graph replay of the call.
    spec8 = formats.prefill_spec("int8", torch.cuda.get_device_capability(), args.d, "float16", True, args.h, args.hkv)

    class StubLibrary:
        @staticmethod
        def qattn_attention_plan_run(*_):
            return 0

    lib = rt._lib
    rt._lib = StubLibrary
    try:
        add("qattn.torch.attention int8, Python side only (C call stubbed)",
            lambda: qt.attention(q, k, v, is_causal=True, fmt="int8"))
    finally:
        rt._lib = lib
    add("ctypes call of qattn_version (the floor of any C call)", lib.qattn_version)
    from qattn.torch import _prefill
    plan = _prefill.plan(q, k, v, spec8, "bshd")
    out8 = torch.empty_like(q)
    ws8 = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    args8 = (rt._handle, plan.handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), out8.data_ptr(), None, None, None,
             0.0, ws8.data_ptr(), torch.cuda.current_stream().cuda_stream)
    add("qattn_attention_plan_run int8 C call alone (prebuilt arguments)", lambda: lib.qattn_attention_plan_run(*args8))
    prepared = rt.prepare(q, k, v, spec8)
    out = torch.empty_like(q)
    add("qattn.Prepared.run int8 (attention kernel only)", lambda: prepared.run(out))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        qt.attention(q, k, v, is_causal=True, fmt="int8")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        qt.attention(q, k, v, is_causal=True, fmt="int8")
    add("CUDA graph replay of qattn.torch.attention int8", graph.replay)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "qattn": qattn.version(),
              "commit": commit, "date": time.strftime("%Y-%m-%d"), "shape": vars(args), "rows": rows,
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "env": {k: v for k, v in os.environ.items() if k.startswith("QATTN_")}}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"torch_overhead{args.label}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
