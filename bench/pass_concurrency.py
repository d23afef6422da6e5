"""Wall time per call of qattn.torch.attention over prompt lengths, for deciding when the quantization
passes of K and V should run on side streams (concurrent) rather than on the caller's stream.

A call's wall time in a back-to-back loop is the larger of its host time (launches, events) and its GPU
time; run once with QATTN_CONCURRENT_PASSES=0 and once without, in the same session, and compare.

    python3 bench/pass_concurrency.py [--n 128,512,...] [--out F.json]
"""
import argparse
import json
import os
import time

import torch


def wall_us(fn, calls=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="128,512,1024,2048,4096,8192")
    parser.add_argument("--b", type=int, default=1)
    parser.add_argument("--h", type=int, default=32)
    parser.add_argument("--hkv", type=int, default=8)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--out")
    args = parser.parse_args()
    import qattn.torch as qt
    rows = []
    for n in (int(x) for x in args.n.split(",")):
        torch.manual_seed(n)
        q = torch.randn(args.b, n, args.h, args.d, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(args.b, n, args.hkv, args.d, device="cuda", dtype=torch.float16) for _ in range(2))
        for fmt in ("int8", "auto"):
            t = min(wall_us(lambda: qt.attention(q, k, v, is_causal=True, fmt=fmt)) for _ in range(3))
            rows.append({"n": n, "fmt": fmt, "wall_us": round(t, 2)})
            print(f"n {n:6d} {fmt:5s} {t:9.2f} us  passes {'serial' if os.environ.get('QATTN_CONCURRENT_PASSES') == '0' else 'concurrent'}",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "shape": vars(args), "rows": rows,
                       "env": {k: v for k, v in os.environ.items() if k.startswith("QATTN_")}}, f, indent=1)


if __name__ == "__main__":
    main()
