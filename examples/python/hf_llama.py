"""A Llama-architecture model (transformers, random weights from a config: nothing is downloaded) running
prefill and 32 decode steps through qattn: the prompt through qattn's quantized prefill kernel, its K/V
written once into qattn's quantized KV cache, each new token appended there and attended by qattn's
decode kernel, the decode step captured in a CUDA graph and replayed.

It compares with the same model under transformers' eager attention, teacher-forced on eager's greedy
tokens: per step the logits' cosine and whether the top-1 token agrees. Then it generates freely with
qattn and reports how many tokens match eager's.

    python3 examples/python/hf_llama.py [--fmt auto] [--cache-fmt int8] [--prompt 512] [--steps 32] [--json F]

Exit: 0 when top-1 agreement is >= --min-top1 (default 0.99), 1 below it, 3 without a CUDA GPU.
"""
import argparse
import json
import sys

import torch


def build_model(seed, layers, device):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=8192, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, head_dim=64, max_position_embeddings=4096,
                         rms_norm_eps=1e-5, attn_implementation="eager")
    return LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval(), config


def set_attention(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


@torch.inference_mode()
def eager_reference(model, prompt, steps):
    """Greedy tokens and per-step logits of eager attention (teacher forcing needs only one pass)."""
    set_attention(model, "eager")
    ids = prompt
    for _ in range(steps):
        logits = model(ids, use_cache=False).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    full = model(ids, use_cache=False).logits.float()
    n = prompt.shape[1]
    return ids[:, n:], full[:, n - 1:n - 1 + steps]


class GraphedDecodeStep:
    """One decode step (a token per sequence) of the model over qattn's cache, captured in a CUDA graph."""

    def __init__(self, model, session, batch, device):
        self.model, self.session = model, session
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.graph = None
        self.logits = None

    def _step(self):
        return self.model(self.token, position_ids=self.position, use_cache=False).logits[:, -1].float()

    def __call__(self, token, position):
        self.token.copy_(token.view(-1, 1))
        self.position.fill_(position)
        self.session.set_position(position)
        if self.graph is None:
            # qattn's calls run once eagerly on the capture stream before being captured (their
            # workspaces and kernels exist then), as docs/reliability.md asks.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._step()
            torch.cuda.current_stream().wait_stream(stream)
            self.session.set_position(position)   # the eager step wrote this position; the replay rewrites it
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                self.logits = self._step()
        self.graph.replay()
        return self.logits


@torch.inference_mode()
def run_qattn(model, prompt, steps, fmt, cache_fmt, teacher, capture):
    """Prefill + decode through qattn; teacher: tokens to feed (None: greedy). Per-step logits."""
    import qattn.torch.hf as qhf
    set_attention(model, qhf.register())
    batch, n = prompt.shape
    session = qhf.Session(model, batch=batch, capacity=n + steps, fmt=fmt, cache_fmt=cache_fmt)
    try:
        logits = [model(prompt, use_cache=False).logits[:, -1].float()]
        step = GraphedDecodeStep(model, session, batch, prompt.device) if capture else None
        tokens = []
        for i in range(steps - 1):
            token = teacher[:, i] if teacher is not None else logits[-1].argmax(-1)
            tokens.append(token)
            if step is not None:
                logits.append(step(token, n + i).clone())
            else:
                session.set_position(n + i)
                pos = torch.full((batch, 1), n + i, dtype=torch.long, device=prompt.device)
                logits.append(model(token.view(-1, 1), position_ids=pos, use_cache=False).logits[:, -1].float())
        tokens.append(logits[-1].argmax(-1))
        return torch.stack(tokens, dim=1), torch.stack(logits, dim=1)
    finally:
        session.close()


def compare(args):
    device = torch.device("cuda")
    model, config = build_model(args.seed, args.layers, device)
    torch.manual_seed(args.seed + 1)
    prompt = torch.randint(0, config.vocab_size, (args.batch, args.prompt), device=device)
    ref_tokens, ref_logits = eager_reference(model, prompt, args.steps)
    _, forced = run_qattn(model, prompt, args.steps, args.fmt, args.cache_fmt, ref_tokens, capture=args.graph)
    cos = torch.nn.functional.cosine_similarity(forced, ref_logits, dim=-1)   # [batch, steps]
    agree = (forced.argmax(-1) == ref_logits.argmax(-1)).float()
    free_tokens, _ = run_qattn(model, prompt, args.steps, args.fmt, args.cache_fmt, None, capture=args.graph)
    same = (free_tokens == ref_tokens).int().cumprod(dim=1).sum(dim=1)
    return {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "fmt": args.fmt, "cache_fmt": args.cache_fmt,
        "batch": args.batch, "prompt": args.prompt, "steps": args.steps, "layers": args.layers, "graph": args.graph,
        "logit_cos_min": cos.min().item(), "logit_cos_mean": cos.mean().item(),
        "top1_agreement": agree.mean().item(), "top1_per_step": agree.mean(0).tolist(),
        "free_run_tokens_matching_eager": same.tolist(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fmt", default="auto")
    parser.add_argument("--cache-fmt", default="int8")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-graph", dest="graph", action="store_false")
    parser.add_argument("--min-top1", type=float, default=0.99)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("hf_llama: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 3
    result = compare(args)
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result["top1_agreement"] >= args.min_top1 else 1


if __name__ == "__main__":
    sys.exit(main())
