"""The drop-in calls: qattn.torch.attention (FlashAttention-shaped, [b, s, h, d] by default) and
qattn.torch.sdpa (F.scaled_dot_product_attention-shaped, [b, h, s, d]).

A format name (qattn.formats) and the tensors make the spec. Nothing here tunes: the device's runtime
(qattn.torch.runtime) uses a stored winner from the user or shipped cache, else the default tiling;
qattn.torch.tune (or `qattn pretune`) stores winners ahead of time.
"""
import torch

from .. import formats
from ..errors import BadInput
from . import _device, _prefill

_specs = {}


def _spec_of(fmt, index, head_dim, dtype, causal, heads_q, heads_kv, layout):
    key = (fmt, index, head_dim, dtype, causal, heads_q, heads_kv, layout)
    spec = _specs.get(key)
    if spec is None:
        formats.check_layout(layout)
        spec = formats.prefill_spec(fmt, _device.capability(index), head_dim, str(dtype).replace("torch.", ""),
                                    causal, heads_q, heads_kv)
        _specs[key] = spec
    return spec


# Under torch.compile the spec is a constant of the graph: computed once at trace time, not traced.
_spec_at_trace = torch.compiler.assume_constant_result(_spec_of)


def _spec(q, k, is_causal, layout, fmt):
    if layout == "bshd":
        heads_q, heads_kv = q.shape[2], k.shape[2]
    else:
        heads_q, heads_kv = q.shape[1], k.shape[1]
    of = _spec_at_trace if torch.compiler.is_compiling() else _spec_of
    return of(fmt, _device.device_index(q), q.shape[-1], q.dtype, bool(is_causal), heads_q, heads_kv, layout)


def _check_4d(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise BadInput(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 4:
            raise BadInput(f"{name} has {t.dim()} dimensions; expected 4")


_calls = {}   # (call arguments, tensors' plan key) -> (plan, scale); cleared with the plans
_device.register_plan_cache(_calls)


def attention(q, k, v, is_causal=False, scale=None, layout="bshd", fmt="auto", return_lse=False):
    """Attention of fp16/bf16 CUDA tensors through a quantized qattn kernel; returns out (a new tensor in
    q's shape), or (out, lse) with return_lse (lse float32 [b, hq, s_q], natural log).

    layout "bshd": q [b, s_q, hq, d], k/v [b, s_kv, hkv, d]; "bhsd": [b, h, s, d]. GQA when hq is a
    multiple of hkv. is_causal masks at each row's end (query i sees keys j <= i + s_kv - s_q: chunked
    prefill over a cached prefix when s_kv > s_q). fmt: "auto" (the fastest measured format of this
    GPU), or a name of qattn.formats.PREFILL_FORMATS / PREFILL_ALIASES. scale None: 1/sqrt(d)."""
    if torch.compiler.is_compiling():
        _check_4d(q, k, v)
        spec = _spec(q, k, is_causal, layout, fmt)
        op = torch.ops.qattn.attention_lse if return_lse else torch.ops.qattn.attention
        return op(q, k, v, spec, layout, formats.check_scale(scale))
    # Eager: the op's body without the dispatcher's per-call cost, its checks done once per call shape.
    try:
        key = (fmt, is_causal, layout, scale) + _prefill.plan_key(q, k, v)
        hit = _calls.get(key)
    except (AttributeError, TypeError):   # not tensors, or an unhashable argument: the checks say which
        key, hit = None, None
    if hit is None:
        _check_4d(q, k, v)
        spec = _spec(q, k, is_causal, layout, fmt)
        hit = (_prefill.plan(q, k, v, spec, layout), formats.check_scale(scale))
        if key is not None:
            if len(_calls) >= _prefill.MAX_PLANS:
                _calls.clear()
            _calls[key] = hit
    return _prefill.launch(hit[0], q, k, v, hit[1], return_lse)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
         fmt="auto"):
    """F.scaled_dot_product_attention's call on [b, h, s, d] tensors, through qattn. No attention mask
    and no dropout (inference); causal with s_q != s_kv is refused because SDPA aligns its causal mask
    at the first key and qattn at the last (use attention() for chunked prefill). GQA is taken from
    the head counts whatever enable_gqa says."""
    if attn_mask is not None:
        raise BadInput("qattn.torch.sdpa takes no attn_mask (causal or none); use is_causal=True or SDPA")
    if dropout_p != 0.0:
        raise BadInput(f"dropout_p is {dropout_p}; qattn is for inference and accepts 0.0 only")
    _check_4d(query, key, value)
    if is_causal and query.shape[2] != key.shape[2]:
        raise BadInput(f"is_causal with {query.shape[2]} queries and {key.shape[2]} keys: SDPA aligns that mask "
                       f"at the first key, qattn at the last; call qattn.torch.attention for the latter")
    return attention(query, key, value, is_causal=is_causal, scale=scale, layout="bhsd", fmt=fmt)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, is_causal=False,
                     scale=None, fmt="auto"):
    """Variable-length attention (flash_attn_varlen_func's call): q [total_q, hq, d], k/v [total_kv, hkv,
    d] packed along dim 0, int32 CUDA offsets cu_seqlens_* [batch + 1], max_seqlen_* the longest lengths
    (Python ints; a longer sequence is cut to them). Causal masks align at each sequence's end."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise BadInput(f"{name} must be a 3-d torch.Tensor [total_tokens, heads, d]")
    index = _device.device_index(q)
    dtype_name = str(q.dtype).replace("torch.", "")
    spec = formats.prefill_spec(fmt, _device.capability(index), q.shape[-1], dtype_name, bool(is_causal),
                                q.shape[1], k.shape[1]) + " varlen"
    return torch.ops.qattn.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, int(max_seqlen_q),
                                            int(max_seqlen_kv), spec, formats.check_scale(scale))


def tune(q, k, v, is_causal=False, layout="bshd", fmt="auto"):
    """Tunes the kernel attention(q, k, v, ...) runs for this shape's bucket on the GPU and stores the
    winner in the runtime's cache, where later calls (and later processes) find it; returns (kernel
    name, median time in µs). Seconds to minutes: call it ahead of time, never on the hot path."""
    _check_4d(q, k, v)
    spec = _spec(q, k, is_causal, layout, fmt)
    if layout == "bshd":
        (b, sq, hq, _), (_, skv, hkv, _) = q.shape, k.shape
    else:
        (b, hq, sq, _), (_, hkv, skv, _) = q.shape, k.shape
    rt = _device.runtime(_device.device_index(q))
    return rt.tune(spec, batch=b, heads_q=hq, heads_kv=hkv, q_len=sq, kv_len=skv)
