"""Format names of the drop-in calls (qattn.torch.attention, the KV cache) and the specs they stand for.

Torch-free, so that the names, the arch rules and the argument checks are tested without a GPU. A
format name fixes the spec's format fields; the tensors fix the rest (d=, out=, gqa=, causal).
"""
from .errors import BadInput

# Prefill formats: the spec's format tokens, the oldest arch (major, minor) that runs them, a note.
PREFILL_FORMATS = {
    "fp16": ("qk={t} pv={t}", (8, 0), "no quantization (16-bit inputs' own type)"),
    "int8": ("qk=int8:per_token pv=int8:per_channel smooth=kv", (8, 0),
             "INT8 Q·Kᵀ per token and INT8 P·V (INT-FlashAttention)"),
    "int8_fp16": ("qk=int8:per_warp pv=fp16 smooth=k", (8, 0), "INT8 Q·Kᵀ per warp, FP16 P·V (SageAttention)"),
    "int8_fp8": ("qk=int8:per_warp pv=fp8e4m3:per_channel smooth=kv", (8, 9),
                 "INT8 Q·Kᵀ per warp, FP8 P·V (SageAttention2)"),
    "int4_fp8": ("qk=int4:per_warp pv=fp8e4m3:per_channel smooth=qkv", (8, 9),
                 "INT4 Q·Kᵀ, FP8 P·V (accuracy depends on the data: run `qattn calibrate` first)"),
    "fp8_fp8": ("qk=fp8e4m3:per_token pv=fp8e4m3:per_channel smooth=kv", (9, 0),
                "FP8 Q·Kᵀ per token and FP8 P·V (FlashAttention-3's and cuDNN's FP8 input; Hopper's wgmma only)"),
}
# Other names users reach for. "fp8" is P·V's format (Q·Kᵀ stays INT8, every FP8 GPU); FP8 Q·Kᵀ is
# "fp8_fp8" (Hopper).
PREFILL_ALIASES = {"bf16": "fp16", "none": "fp16", "fp8": "int8_fp8", "sage2": "int8_fp8", "int4": "int4_fp8"}

# Decode (KV-cache) formats: spec tokens of one cache row format.
DECODE_FORMATS = {
    "bf16": "qk={t} pv={t}",
    "int8": "qk=int8:per_token pv=int8:per_token",
    "fp8": "qk=fp8e4m3:per_head pv=fp8e4m3:per_head",
    "int4": "qk=int4:per_token pv=int4:per_token",
    "int4_group": "qk=int4:per_group pv=int4:per_group",
}
DECODE_ALIASES = {"fp16": "bf16", "none": "bf16"}

# What the tensors' dtype makes of {t} and out=.
SPEC_TYPE = {"float16": "fp16", "bfloat16": "bf16"}
LAYOUTS = ("bshd", "bhsd")


def _type_of(dtype_name):
    try:
        return SPEC_TYPE[dtype_name]
    except KeyError:
        raise BadInput(f"tensors are {dtype_name}; accepted: float16, bfloat16") from None


def auto_prefill_format(capability):
    """The fastest measured prefill format that runs on a GPU of this (major, minor) capability: FP8 P·V
    where the tensor cores have FP8 (sm_89 and newer), else INT8 P·V."""
    return "int8_fp8" if tuple(capability) >= (8, 9) else "int8"


def prefill_format(fmt, capability):
    """The canonical prefill format name of `fmt` ('auto' resolved for `capability`), or BadInput."""
    if not isinstance(fmt, str):
        raise BadInput(f"fmt must be a str, not {type(fmt).__name__}")
    name = auto_prefill_format(capability) if fmt == "auto" else PREFILL_ALIASES.get(fmt, fmt)
    if name not in PREFILL_FORMATS:
        accepted = ", ".join(["auto"] + list(PREFILL_FORMATS) + list(PREFILL_ALIASES))
        raise BadInput(f"fmt '{fmt}' is not a prefill format; accepted: {accepted}")
    oldest = PREFILL_FORMATS[name][1]
    if tuple(capability) < oldest:
        what = "Hopper's FP8 wgmma" if oldest >= (9, 0) else "FP8 tensor cores"
        raise BadInput(f"fmt '{fmt}' needs sm_{oldest[0]}{oldest[1]} or newer ({what}); this GPU is "
                       f"sm_{capability[0]}{capability[1]}: use fmt='int8' or 'auto'")
    return name


def gqa_of(heads_q, heads_kv):
    if heads_kv < 1 or heads_q % heads_kv:
        raise BadInput(f"q has {heads_q} heads and k/v {heads_kv}: q's heads must be a multiple of k/v's (GQA)")
    return heads_q // heads_kv


def prefill_spec(fmt, capability, head_dim, dtype_name, causal, heads_q, heads_kv):
    """The prefill spec text for a drop-in call."""
    name = prefill_format(fmt, capability)
    t = _type_of(dtype_name)
    tokens = ["prefill", PREFILL_FORMATS[name][0].format(t=t), f"out={t}", f"d={head_dim}"]
    if causal:
        tokens.append("causal")
    gqa = gqa_of(heads_q, heads_kv)
    if gqa > 1:
        tokens.append(f"gqa={gqa}")
    return " ".join(tokens)


def decode_format(fmt):
    if not isinstance(fmt, str):
        raise BadInput(f"fmt must be a str, not {type(fmt).__name__}")
    name = DECODE_ALIASES.get(fmt, fmt)
    if name not in DECODE_FORMATS:
        accepted = ", ".join(list(DECODE_FORMATS) + list(DECODE_ALIASES))
        raise BadInput(f"fmt '{fmt}' is not a KV-cache format; accepted: {accepted}")
    return name


# FlashQ's cache (qattn.torch.FlashQCache): blocks with per-head bit widths, not a row format.
FLASHQ_FORMAT = "qk=flashq:per_channel pv=flashq:per_channel"


def decode_spec(fmt, head_dim, dtype_name, heads_q, heads_kv, paged):
    """The decode spec text of a KV cache in format `fmt` read by heads_q query heads."""
    return cache_spec(DECODE_FORMATS[decode_format(fmt)], head_dim, dtype_name, heads_q, heads_kv, paged)


def cache_spec(format_tokens, head_dim, dtype_name, heads_q, heads_kv, paged):
    """The decode spec text of a cache whose format tokens are `format_tokens` ({t}: the 16-bit type)."""
    t = _type_of(dtype_name)
    tokens = ["decode", format_tokens.format(t=t), f"out={t}", f"d={head_dim}"]
    gqa = gqa_of(heads_q, heads_kv)
    if gqa > 1:
        tokens.append(f"gqa={gqa}")
    if paged:
        tokens.append("paged")
    return " ".join(tokens)


def check_layout(layout):
    if layout not in LAYOUTS:
        raise BadInput(f"layout '{layout}' is not supported; accepted: {', '.join(LAYOUTS)}")
    return layout


def check_scale(scale):
    """The softmax scale as the C API reads it: 0.0 for None (1/sqrt(d)), else a positive float."""
    if scale is None:
        return 0.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise BadInput(f"scale must be a float or None, not {type(scale).__name__}")
    if not scale > 0.0:
        raise BadInput(f"scale is {scale}; it must be > 0 (None: 1/sqrt(d))")
    return float(scale)
