"""Pure-Python parts of the prefill benchmark: the shape grid, specs, FLOP counting, statistics, result
files (JSON and a Markdown table). No torch here, so bench/test_bench_utils.py checks all of it on CPU.
"""
import json
import os
import re
import shlex
from dataclasses import asdict, dataclass

HIDDEN = 2048          # model width: heads = HIDDEN / d
TOKENS = 16 * 1024     # batch * seq_len, constant so every shape moves the same bytes

HEAD_DIMS = (64, 128, 256)
SEQ_LENS = (1024, 2048, 4096, 8192, 16384, 32768)
# The default grid (issue 2's): d 64 / 128 at N 1k, 4k, 16k. --grid formats is issue 3's: every head dim
# and length above (N > TOKENS runs batch 1).
DEFAULT_HEAD_DIMS = (64, 128)
DEFAULT_SEQ_LENS = (1024, 4096, 16384)
QUICK = ((128, 4096, False), (128, 4096, True), (64, 4096, False))   # (d, N, causal) of --quick
# --grid peers: the shapes the Hopper prefill kernel is compared with SageAttention2 and cuDNN on,
# (d, N, batch, heads), each causal and not: H 32 at B·N = 16k, a long single sequence, and a d 64 video
# model's length (H 24, N 17776).
PEER_SHAPES = ((128, 16384, 1, 32), (128, 4096, 4, 32), (128, 1024, 16, 32), (64, 17776, 1, 24), (128, 32768, 1, 32))


@dataclass(frozen=True)
class Shape:
    d: int
    n: int          # q_len = kv_len
    causal: bool
    batch: int
    heads: int      # heads_q = heads_kv

    @property
    def label(self):
        return f"d={self.d} N={self.n} B={self.batch} H={self.heads}{' causal' if self.causal else ''}"


def make_shape(d, n, causal):
    if HIDDEN % d or (TOKENS % n and n % TOKENS):
        raise ValueError(f"d={d} must divide {HIDDEN} and N={n} must divide or be a multiple of {TOKENS}")
    return Shape(d=d, n=n, causal=causal, batch=max(1, TOKENS // n), heads=HIDDEN // d)


def shape_grid(quick=False, head_dims=None, seq_lens=None, causal=None, grid="default"):
    """The benchmarked shapes, optionally filtered (None: no filter on that axis)."""
    if grid == "peers" and not quick:
        return [Shape(d=d, n=n, causal=c, batch=b, heads=h) for d, n, b, h in PEER_SHAPES for c in (False, True)
                if (head_dims is None or d in head_dims) and (seq_lens is None or n in seq_lens)
                and (causal is None or c in causal)]
    if quick:
        triples = list(QUICK)
    else:
        dims, lens = (HEAD_DIMS, SEQ_LENS) if grid == "formats" else (DEFAULT_HEAD_DIMS, DEFAULT_SEQ_LENS)
        triples = [(d, n, c) for d in dims for n in lens for c in (False, True)]
    return [make_shape(d, n, c) for d, n, c in triples
            if (head_dims is None or d in head_dims) and (seq_lens is None or n in seq_lens)
            and (causal is None or c in causal)]


# Benchmarked variants in table order: (name, kind, spec template or SDPA backend).
SDPA_VARIANTS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}
QATTN_VARIANTS = {
    "qattn_fp16": "prefill qk=fp16 pv=fp16 out=fp16 d={d}{causal}",
    "qattn_int8_per_token": "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d={d}{causal} smooth=kv",
    "qattn_int8_per_block": "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d={d}{causal} smooth=kv",
    "qattn_int8_per_tensor": "prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d={d}{causal} smooth=kv",
    # Issue 3's formats (SageAttention2): 8-bit and 4-bit QK with FP8 or FP16 P·V.
    "qattn_int8_fp8": "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=kv",
    "qattn_int8_fp8_2lvl": "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d={d}{causal} "
                           "accum=two_level smooth=kv",
    "qattn_int8_fp16": "prefill qk=int8:per_warp pv=fp16 out=fp16 d={d}{causal} smooth=k",
    "qattn_int8_fp16_acc16": "prefill qk=int8:per_warp pv=fp16 out=fp16 d={d}{causal} accum=fp16 smooth=k",
    "qattn_int4_fp8": "prefill qk=int4:per_warp pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=qkv",
    # The same two with Q and K through the Hadamard rotation (rotate=hadamard) before quantization.
    "qattn_int8_fp8_rot": "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=kv "
                          "rotate=hadamard",
    "qattn_int4_fp8_rot": "prefill qk=int4:per_warp pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=qkv "
                          "rotate=hadamard",
    # FP8 Q·K^T (Hopper): FlashAttention-3's and cuDNN's FP8 input, per token and per 64-key block.
    "qattn_fp8_per_token": "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=kv",
    "qattn_fp8_per_block": "prefill qk=fp8e4m3:per_block pv=fp8e4m3:per_channel out=fp16 d={d}{causal} smooth=kv",
}
# The variants of the default grid (issue 2's table); --grid formats runs them all.
DEFAULT_VARIANTS = ["sdpa_flash", "sdpa_cudnn", "qattn_fp16", "qattn_int8_per_token", "qattn_int8_per_block",
                    "qattn_int8_per_tensor"]
# Peer kernels (bench/peers/): SageAttention2's sm90 kernel at its two Q/K granularities.
PEER_VARIANTS = {"sage2_per_warp": "per_warp", "sage2_per_thread": "per_thread"}
# --grid peers: the baselines, qattn's INT8 formats on Hopper and the peer.
PEER_GRID_VARIANTS = ["sdpa_flash", "sdpa_cudnn", "qattn_int8_per_token", "qattn_int8_fp8", "qattn_int8_fp8_2lvl",
                      "qattn_fp8_per_token", "qattn_fp8_per_block", "sage2_per_warp"]
ALL_VARIANTS = list(SDPA_VARIANTS) + list(QATTN_VARIANTS) + list(PEER_VARIANTS)
BASELINE_OF_RATIO = {"ratio_flash": "sdpa_flash", "ratio_cudnn": "sdpa_cudnn"}


def qattn_spec(variant, shape):
    return QATTN_VARIANTS[variant].format(d=shape.d, causal=" causal" if shape.causal else "")


def parse_list(text, allowed, what, convert=str):
    """'a,b' -> [a, b], each checked against `allowed`; a one-line ValueError naming what is accepted."""
    items = [convert(t.strip()) for t in text.split(",") if t.strip()]
    for item in items:
        if item not in allowed:
            raise ValueError(f"unknown {what} '{item}'; accepted: {', '.join(str(a) for a in allowed)}")
    if not items:
        raise ValueError(f"empty {what} list; accepted: {', '.join(str(a) for a in allowed)}")
    return items


def attention_flops(shape):
    """4·B·H·N²·d (two GEMMs of 2·N²·d each per head), halved when causal: the usual FA convention."""
    flops = 4 * shape.batch * shape.heads * shape.n * shape.n * shape.d
    return flops // 2 if shape.causal else flops


def tflops(flops, time_ms):
    if not time_ms or time_ms <= 0:
        return None
    return flops / (time_ms * 1e-3) / 1e12


def median(values):
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def summarize_times(times_ms):
    return {"time_ms": median(times_ms), "time_ms_min": min(times_ms), "time_ms_max": max(times_ms),
            "samples": len(times_ms)}


def add_ratios(rows):
    """Speed-up of each row over the SDPA baselines of the same shape: baseline time / row time."""
    baseline = {}
    for r in rows:
        if r["variant"] in SDPA_VARIANTS and r.get("time_ms"):
            baseline[(shape_key(r), r["variant"])] = r["time_ms"]
    for r in rows:
        for key, variant in BASELINE_OF_RATIO.items():
            base = baseline.get((shape_key(r), variant))
            r[key] = base / r["time_ms"] if base and r.get("time_ms") else None
    # Quantization overhead of an end-to-end row: (e2e - kernel) / kernel of the same variant and shape.
    kernel = {(shape_key(r), r["variant"]): r["time_ms"] for r in rows if r["mode"] == "kernel" and r.get("time_ms")}
    for r in rows:
        base = kernel.get((shape_key(r), r["variant"])) if r["mode"] == "e2e" else None
        r["quant_overhead"] = (r["time_ms"] - base) / base if base and r.get("time_ms") else None
    return rows


def shape_key(row):
    return (row["d"], row["n"], row["causal"])


def shape_fields(shape):
    return asdict(shape)


def device_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3' (file-name safe)."""
    slug = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.IGNORECASE).lower()
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")
    return slug or "unknown-device"


def result_paths(out_dir, slug, date, prefix="prefill"):
    """(json, md) paths <prefix>_<slug>_<date>[_k] that do not exist yet: a second run the same day
    never overwrites the first."""
    base = f"{prefix}_{slug}_{date}"
    k = 1
    while True:
        stem = base if k == 1 else f"{base}_{k}"
        json_path, md_path = (os.path.join(out_dir, stem + ext) for ext in (".json", ".md"))
        if not os.path.exists(json_path) and not os.path.exists(md_path):
            return json_path, md_path
        k += 1


def shell_command(argv):
    return " ".join(shlex.quote(a) for a in argv)


def write_json(path, meta, rows):
    """Atomic (write + rename): the file is rewritten after every shape, and a run killed in the middle
    must leave the previous complete version, never half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def _ratio(value):
    return "–" if value is None else f"{value:.2f}×"


MD_COLUMNS = ["d", "N", "B×H", "causal", "variant", "mode", "ms", "TFLOPS", "vs flash", "vs cuDNN", "quant",
              "cosine", "rel L2", "max abs"]


def markdown_row(r):
    acc = r.get("accuracy") or {}
    if r.get("error"):
        timing = [f"failed: {one_line(r['error'], 80)}", "–", "–", "–", "–"]
    else:
        overhead = r.get("quant_overhead")
        timing = [_fmt(r.get("time_ms"), ".3f"), _fmt(r.get("tflops"), ".0f"), _ratio(r.get("ratio_flash")),
                  _ratio(r.get("ratio_cudnn")), "–" if overhead is None else f"{100 * overhead:+.0f}%"]
    if acc.get("finite") is False:
        quality = ["NaN/Inf in output", "–", "–"]
    else:
        quality = [_fmt(acc.get("cosine"), ".6f"), _fmt(acc.get("rel_l2"), ".2e"), _fmt(acc.get("max_abs"), ".2e")]
    cells = [str(r["d"]), str(r["n"]), f"{r['batch']}×{r['heads']}", "yes" if r["causal"] else "no",
             r["variant"], r["mode"]] + timing + quality
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def one_line(text, limit):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def render_markdown(meta, rows):
    lines = [f"# Prefill attention on {meta.get('device', '?')} ({meta.get('date', '?')})", ""]
    for key in ("device", "driver", "torch", "cuda", "cudnn", "qattn", "commit", "command"):
        if meta.get(key) is not None:
            value = f"`{meta[key]}`" if key in ("command", "commit") else str(meta[key])
            lines.append(f"- {key}: {value}")
    if not meta.get("complete", True):
        lines.append("- **incomplete run**: the shapes below are those finished before it stopped")
    lines += ["",
              f"Shapes: B×H per row (the default and formats grids: hidden {HIDDEN}, H = {HIDDEN}/d, B·N = {TOKENS} "
              f"tokens). TFLOPS = 4·B·H·N²·d / t, halved when "
              f"causal (effective ops for INT8). Median of {meta.get('iters', '?')} timed calls (CUDA events) "
              f"rotating {meta.get('sets', '?')} input sets. mode: `kernel` = attention kernel alone on "
              f"prepared (quantized) inputs, `e2e` = the call from fp16 incl. quantization (qattn_attention, or the peer's own call), `sdpa` = PyTorch. "
              f"'vs' = baseline time / this time (> 1: faster). quant (e2e rows) = (e2e - kernel) / kernel: the "
              f"share quantization adds to the attention time. Accuracy vs an fp64 reference on a slice "
              f"({meta.get('accuracy_slice', '?')}).", ""]
    lines.append("| " + " | ".join(MD_COLUMNS) + " |")
    lines.append("|" + "|".join("---" for _ in MD_COLUMNS) + "|")
    lines += [markdown_row(r) for r in rows]
    return "\n".join(lines) + "\n"


def write_markdown(path, meta, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(render_markdown(meta, rows))
    os.replace(tmp, path)
