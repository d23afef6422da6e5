"""A diffusion-transformer block (self-attention over image tokens, non-causal, then an MLP) whose
attention is one line: qattn.torch.sdpa in place of F.scaled_dot_product_attention.

    python3 examples/python/dit_block.py [--tokens 4096] [--fmt auto] [--json F]

For head dims 64 and 128 it runs the block with SDPA and with qattn on the same weights and inputs,
and prints the block output's difference (cosine, rel L2, max abs), the attention output's against
float64 for both calls, and both attention times on the block's own q, k, v.
Exit: 0 when qattn's attention cosine is >= --min-cos (default 0.99) at every head dim, 1 below, 3
without a CUDA GPU.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F


class DiTBlock(torch.nn.Module):
    def __init__(self, width, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1 = torch.nn.LayerNorm(width, elementwise_affine=False)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width, elementwise_affine=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(approximate="tanh"),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attention(q, k, v).transpose(1, 2).reshape(b, n, w))   # [b, h, n, d] in and out
        return x + self.mlp(self.norm2(x))


def errors(out, ref):
    o, r = out.double().flatten(), ref.double().flatten()
    return {"cos": F.cosine_similarity(o, r, dim=0).item(), "rel_l2": ((o - r).norm() / r.norm()).item(),
            "max_abs": (o - r).abs().max().item()}


def time_ms(fn, repeats=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


@torch.inference_mode()
def run(head_dim, tokens, batch, fmt, seed):
    import qattn.torch as qt
    torch.manual_seed(seed)
    heads = 1152 // head_dim if head_dim == 64 else 2048 // head_dim
    width = heads * head_dim
    seen = {}

    def sdpa_keeping_inputs(q, k, v):
        seen["qkv"] = (q, k, v)
        return F.scaled_dot_product_attention(q, k, v)

    block = DiTBlock(width, heads, sdpa_keeping_inputs).cuda().to(torch.bfloat16)
    x = torch.randn(batch, tokens, width, device="cuda", dtype=torch.bfloat16)
    ref = block(x).double()
    block.attention = lambda q, k, v: qt.sdpa(q, k, v, fmt=fmt)   # the one-line change
    out = block(x).double()
    q, k, v = seen["qkv"]
    attn_ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) / head_dim ** 0.5, -1) @ v.double()
    return {
        "head_dim": head_dim, "heads": heads, "tokens": tokens, "batch": batch, "fmt": fmt,
        "block": errors(out, ref), "attention_vs_float64": errors(qt.sdpa(q, k, v, fmt=fmt), attn_ref),
        "sdpa_attention_vs_float64": errors(F.scaled_dot_product_attention(q, k, v), attn_ref),
        "sdpa_attention_ms": time_ms(lambda: F.scaled_dot_product_attention(q, k, v)),
        "qattn_attention_ms": time_ms(lambda: qt.sdpa(q, k, v, fmt=fmt)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--fmt", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-cos", type=float, default=0.99)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("dit_block: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 3
    results = [run(d, args.tokens, args.batch, args.fmt, args.seed) for d in (64, 128)]
    print(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    return 0 if all(r["attention_vs_float64"]["cos"] >= args.min_cos for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
