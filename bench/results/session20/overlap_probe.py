"""Probe: does splitting one end-to-end call into G head groups on G streams hide the K/V quantization
passes under the other groups' attention kernels? Times (median of CUDA-event calls, rotating 3 input
sets): the kernel alone on prepared inputs, the end-to-end call, and the split call for G in GROUPS."""
import os
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "bench")]
import bench_torch as bt  # noqa: E402
import bench_utils as bu  # noqa: E402
import qattn  # noqa: E402

GROUPS = [2, 4, 8]
SHAPES = [(128, 4096, False), (128, 4096, True), (128, 8192, True), (128, 16384, True), (64, 4096, True),
          (64, 4096, False)]
VARIANTS = ["qattn_int8_fp8", "qattn_int8_per_token"]
rt = qattn.Runtime(cache_path=os.environ.get("QATTN_BENCH_CACHE", "/tmp/qb.db"), tune=False, device=0)
LOW, HIGH = torch.cuda.Stream.priority_range()
print("stream priority range (low, high):", LOW, HIGH, flush=True)
streams = [torch.cuda.Stream() for _ in range(max(GROUPS))]
# Later groups on higher priority: group g + 1's quantization passes are dispatched ahead of group g's
# remaining attention CTAs instead of after them.
rising = [torch.cuda.Stream(priority=max(HIGH, LOW - g)) for g in range(max(GROUPS))]
print("rising priorities:", [s.priority for s in rising], flush=True)


def split_call(q, k, v, out, spec, groups, pool):
    cur = torch.cuda.current_stream()
    start = torch.cuda.Event()
    start.record(cur)
    h = q.shape[2]
    step = h // groups
    for g in range(groups):
        s = pool[g]
        s.wait_event(start)
        sl = slice(g * step, (g + 1) * step)
        with torch.cuda.stream(s):
            rt.attention(q[:, :, sl], k[:, :, sl], v[:, :, sl], spec, out=out[:, :, sl])
        done = torch.cuda.Event()
        done.record(s)
        cur.wait_event(done)


def median(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2]


for d, n, causal in SHAPES:
    shape = bu.make_shape(d, n, causal)
    dev = torch.device("cuda", 0)
    inputs = [bt.make_inputs(shape, 1234 + 7919 * i + 31 * d + n + causal, dev) for i in range(3)]
    ref = bt.reference_slice(*inputs[0], shape)
    outs = [torch.empty_like(inputs[i][0]) for i in range(3)]
    for variant in VARIANTS:
        spec = bu.qattn_spec(variant, shape)
        prepared = [rt.prepare(*inputs[i], spec) for i in range(3)]
        torch.cuda.synchronize()
        res = {}
        res["kernel"] = median(bt.time_calls(lambda i: prepared[i].run(out=outs[i]), 3, 6, 30))
        for p in prepared:
            p.close()
        for o in outs:
            o.fill_(float("nan"))
        res["e2e"] = median(bt.time_calls(lambda i: rt.attention(*inputs[i], spec, out=outs[i]), 3, 6, 30))
        acc = bt.accuracy(outs[0], ref, shape)
        line = f"d={d:3d} N={n:5d} causal={int(causal)} {variant:22s} kernel {res['kernel']:.3f} e2e {res['e2e']:.3f} " \
               f"(+{100 * (res['e2e'] / res['kernel'] - 1):.1f}%) cos {acc['cosine'] or float('nan'):.6f}"
        for name, pool in (("", streams), ("up", rising)):
            for g in GROUPS:
                if shape.heads % g:
                    continue
                for o in outs:
                    o.fill_(float("nan"))
                t = median(bt.time_calls(lambda i: split_call(*inputs[i], outs[i], spec, g, pool), 3, 6, 30))
                acc = bt.accuracy(outs[0], ref, shape)
                line += f" | {name}G{g} {t:.3f} (+{100 * (t / res['kernel'] - 1):.1f}%, cos {acc['cosine'] or float('nan'):.6f})"
        print(line, flush=True)
    del inputs, outs
    torch.cuda.empty_cache()
