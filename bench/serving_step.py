"""One serving step of chunked prefill, qattn's quantized KV cache against a BF16 cache and PyTorch's
fastest 16-bit attention, same run (issue "Serve real engines", its serving-step target).

A batch of sequences of mixed prompt lengths around --prompt; each has a cached prefix (--prefix of its
prompt, written by an earlier step) and a new chunk (the rest). One step:
  qattn:    append the chunk's K/V into qattn's paged cache by slot mapping (quantized once, there),
            then prefill the chunk's queries over the cache (qt.KvCache.append_slots + .prefill);
  baseline: write the chunk's K/V into a BF16 cache (index_copy_ by the same slots), then attention of
            the chunk's queries over the cached rows, causal at each sequence's end:
            (a) F.scaled_dot_product_attention per sequence (lower-right causal mask; torch's backend
                choice, and cuDNN alone when it takes the call),
            (b) the FlashAttention variable-length entry torch ships (aten::_flash_attention_forward)
                over packed K/V: once with the gather of the cached rows into packed tensors in the step
                (what reading a cache through that entry costs), once with packed K/V given (its floor).
GPU time per step: CUDA events around --iters steps, median of 5 repeats. Accuracy: each output
against float64 attention over the same bf16 tokens (cos, rel L2, max abs), per format.

    python3 bench/serving_step.py [--prompt 4096] [--batch 4] [--prefix 0.5] [--tune] [--out F.json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def gpu_us(fn, iters, repeats=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(times)


def reference(q, k, v):
    """float64 attention of one sequence, causal at its end: q [c, hq, d], k / v [L, hkv, d]."""
    q, k, v = (x.double().transpose(0, 1) for x in (q, k, v))
    k, v = (x.repeat_interleave(q.shape[0] // k.shape[0], 0) for x in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    c, length = q.shape[1], k.shape[1]
    i = torch.arange(c, device=q.device)[:, None]
    j = torch.arange(length, device=q.device)[None, :]
    s = s.masked_fill(j > i + length - c, float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(0, 1)


def errors(out, ref):
    o, r = out.double().flatten(), ref.flatten()
    return {"cos": round(F.cosine_similarity(o, r, dim=0).item(), 6), "rel_l2": round(((o - r).norm() / r.norm()).item(), 5),
            "max_abs": round((o - r).abs().max().item(), 5)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prefix", type=float, default=0.5, help="fraction of each prompt already cached")
    parser.add_argument("--hq", type=int, default=32)
    parser.add_argument("--hkv", type=int, default=8)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--tune", action="store_true",
                        help="tune qattn's prefill kernel for this batch's bounds first (what `qattn pretune` and a "
                             "shipped cache give a deployment); without it: the default tiling")
    parser.add_argument("--out")
    args = parser.parse_args()
    import qattn
    import qattn.torch as qt

    dev, dt = torch.device("cuda"), torch.bfloat16
    hq, hkv, d = args.hq, args.hkv, args.d
    mix = [1.0, 0.5, 1.5, 0.75, 1.25, 1.0, 0.625, 1.375]
    prompts = [max(16, int(args.prompt * mix[i % len(mix)])) for i in range(args.batch)]
    prefix = [int(p * args.prefix) for p in prompts]
    chunk = [p - c for p, c in zip(prompts, prefix)]
    cap = -(-max(prompts) // args.page) * args.page
    gen = torch.Generator(device="cpu").manual_seed(1)

    def tokens(n, heads, bias=0.0):
        x = torch.randn(n, heads, d, generator=gen)
        if bias:
            x += bias * torch.randn(1, heads, d, generator=gen)   # channel bias (K)
        return x.to(dt).to(dev)

    # Each sequence's prompt K/V (bf16), its chunk's queries; a sink-like first key, large Q channels.
    ks = [tokens(p, hkv, 4.0) for p in prompts]
    for k in ks:
        k[0] *= 6
    vs = [tokens(p, hkv) for p in prompts]
    qs = [tokens(c, hq) for c in chunk]
    for q in qs:
        q[..., 3] *= 8
    b = args.batch
    cu_q = torch.tensor([0] + list(torch.tensor(chunk).cumsum(0)), dtype=torch.int32, device=dev)
    kv_lens = torch.tensor(prompts, dtype=torch.int32, device=dev)
    q_packed = torch.cat(qs)
    k_new = torch.cat([k[c:] for k, c in zip(ks, prefix)])
    v_new = torch.cat([v[c:] for v, c in zip(vs, prefix)])
    # Slots of the chunk's tokens: sequence s owns rows [s * cap, (s + 1) * cap) (contiguous pages).
    slots = torch.cat([torch.arange(s * cap + c, s * cap + p) for s, (c, p) in enumerate(zip(prefix, prompts))]).to(dev)
    rows = {"shape": {"batch": b, "prompts": prompts, "prefix": prefix, "chunk": chunk, "hq": hq, "hkv": hkv, "d": d,
                      "dtype": "bfloat16", "page_size": args.page}, "results": []}
    refs = [reference(q, k, v) for q, k, v in zip(qs, ks, vs)]

    def check(name, outs):
        errs = [errors(o, r) for o, r in zip(outs, refs)]
        return {"cos_min": min(e["cos"] for e in errs), "rel_l2_max": max(e["rel_l2"] for e in errs),
                "max_abs": max(e["max_abs"] for e in errs)}

    def add(name, us, acc):
        rows["results"].append({"step": name, "gpu_us": round(us, 1), **acc})
        print(f"{name:72s} {us:9.1f} us   cos_min {acc['cos_min']:.6f}  rel_l2 {acc['rel_l2_max']:.5f}", flush=True)

    # -- qattn: the quantized paged cache -------------------------------------------------------------
    if args.tune:   # the variable-length call runs the tiling tuned for its bounds' equal-length twin
        qd = torch.randn(b, max(chunk), hq, d, dtype=dt, device=dev)
        kd = torch.randn(b, max(prompts), hkv, d, dtype=dt, device=dev)
        name, us = qt.tune(qd, kd, kd, is_causal=True, fmt="auto")
        rows["tuned"] = {"kernel": name, "us": us}
        print(f"tuned for the bounds: {name} ({us:.1f} us on dense inputs)", flush=True)
    for fmt in ("int8", "fp8"):
        cache = qt.KvCache(fmt, batch=b, heads_kv=hkv, head_dim=d, capacity=cap, heads_q=hq, dtype=dt, page_size=args.page)
        # The cached prefixes, written by an earlier step.
        pre_slots = torch.cat([torch.arange(s * cap, s * cap + c) for s, c in enumerate(prefix)]).to(dev)
        cache.append_slots(torch.cat([k[:c] for k, c in zip(ks, prefix)]), torch.cat([v[:c] for v, c in zip(vs, prefix)]),
                           pre_slots)

        def step(cache=cache):
            cache.append_slots(k_new, v_new, slots)
            return cache.prefill(q_packed, cu_q, max(chunk), kv_lens, max_kv_len=max(prompts), fmt="auto")

        out = step()
        outs = [out[cu_q[s]:cu_q[s + 1]] for s in range(b)]
        add(f"qattn {fmt} cache: append_slots + prefill over the cache (fmt auto)", gpu_us(step, args.iters),
            check(fmt, outs))

    # -- baseline: BF16 cache + 16-bit attention -------------------------------------------------------
    kc = torch.zeros(b * cap, hkv, d, dtype=dt, device=dev)
    vc = torch.zeros(b * cap, hkv, d, dtype=dt, device=dev)
    for s in range(b):
        kc[s * cap:s * cap + prefix[s]] = ks[s][:prefix[s]]
        vc[s * cap:s * cap + prefix[s]] = vs[s][:prefix[s]]

    def write():
        kc.index_copy_(0, slots, k_new)
        vc.index_copy_(0, slots, v_new)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    def sdpa_step():
        write()
        outs = []
        for s in range(b):
            q = qs[s].transpose(0, 1)[None]
            k = kc[s * cap:s * cap + prompts[s]].transpose(0, 1)[None]
            v = vc[s * cap:s * cap + prompts[s]].transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(chunk[s], prompts[s]), enable_gqa=True)
            outs.append(o[0].transpose(0, 1))
        return outs

    for label, backends in (("torch's choice", None), ("cuDNN", [SDPBackend.CUDNN_ATTENTION]),
                            ("flash", [SDPBackend.FLASH_ATTENTION])):
        try:
            if backends is None:
                outs = sdpa_step()
                us = gpu_us(sdpa_step, args.iters)
            else:
                with sdpa_kernel(backends):
                    outs = sdpa_step()
                    us = gpu_us(sdpa_step, args.iters)
            add(f"bf16 cache write + SDPA per sequence ({label})", us, check("sdpa", outs))
        except Exception as e:   # the backend refused this call (mask, GQA, shape)
            print(f"SDPA per sequence ({label}): not available for this call: {str(e).splitlines()[0][:120]}")
            rows["results"].append({"step": f"bf16 cache write + SDPA per sequence ({label})", "unavailable": str(e)[:300]})

    cu_k = torch.tensor([0] + list(torch.tensor(prompts).cumsum(0)), dtype=torch.int32, device=dev)
    packed_k = torch.cat([kc[s * cap:s * cap + prompts[s]] for s in range(b)])
    packed_v = torch.cat([vc[s * cap:s * cap + prompts[s]] for s in range(b)])

    def flash(k, v):
        # aten::_flash_attention_forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
        # return_debug_mask): causal aligned at each sequence's end (FlashAttention 2's convention).
        return torch.ops.aten._flash_attention_forward(q_packed, k, v, cu_q, cu_k, max(chunk), max(prompts), 0.0, True,
                                                       False)[0]

    def flash_gather_step():
        write()
        k = torch.cat([kc[s * cap:s * cap + prompts[s]] for s in range(b)])
        v = torch.cat([vc[s * cap:s * cap + prompts[s]] for s in range(b)])
        return flash(k, v)

    def flash_packed_step():
        write()
        return flash(packed_k, packed_v)

    for label, fn in (("gather of the cached rows included", flash_gather_step), ("packed K/V given", flash_packed_step)):
        try:
            out = fn()
            outs = [out[cu_q[s]:cu_q[s + 1]] for s in range(b)]
            add(f"bf16 cache write + flash varlen ({label})", gpu_us(fn, args.iters), check("flash", outs))
        except Exception as e:   # no such entry in this torch, or it refused the call
            print(f"flash varlen ({label}): not available: {str(e).splitlines()[0][:120]}")
            rows["results"].append({"step": f"bf16 cache write + flash varlen ({label})", "unavailable": str(e)[:300]})

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows.update({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "qattn": qattn.version(),
                 "commit": commit, "date": time.strftime("%Y-%m-%d"),
                 "command": " ".join([os.path.basename(sys.executable)] + sys.argv)})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
