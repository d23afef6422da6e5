"""The body of Runtime.attention_varlen over the C API (qattn_attention_varlen): a batch of sequences of
their own lengths, packed one after another along dim 0 of q [total_q, hq, d] and k, v [total_kv, hkv, d].

The offsets stay on the device: nothing here reads them (no host sync), so the caller's max_seqlen_q /
max_seqlen_kv are the bounds the kernels size their grids with, and a longer sequence is cut to them.
"""
import ctypes

from . import _library
from . import layout as checks
from .errors import BadInput, check


def _tensor(torch, name, value):
    if not isinstance(value, torch.Tensor):
        raise BadInput(f"{name} must be a torch.Tensor, not {type(value).__name__}")
    if not value.is_cuda:
        raise BadInput(f"{name} is on {value.device}; qattn needs CUDA tensors")
    return value


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _packed(torch, spec, name, value):
    """(tensor, qattn_tensor, (tokens, heads, d)) of a packed fp16/bf16 CUDA tensor."""
    t = _tensor(torch, name, value)
    dims, strides = checks.decompose_packed(name, tuple(t.shape), t.stride())
    if _dtype_name(t) not in checks.DTYPE_OF_OUT.values():
        raise BadInput(f"{name} is {_dtype_name(t)}; accepted: float16, bfloat16")
    checks.check_dtype(spec, _dtype_name(t))
    return t, _library.Tensor(t.data_ptr(), *strides), dims


def _offsets(torch, name, value):
    """(tensor, batch) of a cu_seqlens tensor."""
    t = _tensor(torch, name, value)
    batch = checks.check_cu_seqlens(name, tuple(t.shape), _dtype_name(t), t.is_contiguous())
    return t, batch


def _outputs(torch, spec, q, dq, heads_q, out, lse):
    """(out, its qattn_tensor, lse) of a packed call: out allocated like q when None, both checked."""
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    out, co, do = _packed(torch, spec, "out", out)
    if do != dq or out.dtype != q.dtype:
        raise BadInput(f"out is {_dtype_name(out)} {list(do)} but q is {_dtype_name(q)} {list(dq)}; they must match")
    if lse is not None:
        lse = _tensor(torch, "lse", lse)
        checks.check_packed_lse(tuple(lse.shape), _dtype_name(lse), lse.is_contiguous(), dq[0], heads_q)
    return out, co, lse


def describe(runtime, q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec):
    """The checked pieces of a variable-length call: (spec bytes with varlen, the packed qattn_tensors of
    q, k, v, q's (tokens, heads, d), the qattn_shape, the offset tensors)."""
    from .runtime import _torch, _encode, _check_same_device
    torch = _torch()
    _encode(spec, "spec")   # a str, or BadInput
    spec_b = _encode(checks.with_varlen(spec), "spec")
    q, cq, dq = _packed(torch, spec, "q", q)
    k, ck, dk = _packed(torch, spec, "k", k)
    v, cv, dv = _packed(torch, spec, "v", v)
    if not q.dtype == k.dtype == v.dtype:
        raise BadInput(f"q, k, v have dtypes {_dtype_name(q)}, {_dtype_name(k)}, {_dtype_name(v)}; they must be one")
    heads_q, heads_kv = checks.check_packed_problem(spec, dq, dk, dv)
    cu_q, batch = _offsets(torch, "cu_seqlens_q", cu_seqlens_q)
    cu_kv, batch_kv = _offsets(torch, "cu_seqlens_kv", cu_seqlens_kv)
    checks.check_same_batch(batch, batch_kv)
    q_len = checks.check_max_seqlen("max_seqlen_q", max_seqlen_q)
    kv_len = checks.check_max_seqlen("max_seqlen_kv", max_seqlen_kv)
    _check_same_device(runtime, [("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_kv)])
    shape = _library.Shape(batch, heads_q, heads_kv, q_len, kv_len)
    return spec_b, (cq, ck, cv), dq, shape, (cu_q, cu_kv)


def attention_varlen(runtime, q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec, out,
                     softmax_scale, lse):
    from .runtime import _torch, _scale, _check_same_device
    torch = _torch()
    spec_b, (cq, ck, cv), dq, shape, (cu_q, cu_kv) = describe(runtime, q, k, v, cu_seqlens_q, cu_seqlens_kv,
                                                               max_seqlen_q, max_seqlen_kv, spec)
    heads_q = shape.heads_q
    out, co, lse = _outputs(torch, spec, q, dq, heads_q, out, lse)
    lse_ptr = None if lse is None else lse.data_ptr()
    _check_same_device(runtime, [("out", out)] + ([("lse", lse)] if lse is not None else []))
    lib = runtime._lib
    stream = torch.cuda.current_stream(runtime.device).cuda_stream
    with runtime._call() as handle:
        check(lib, lib.qattn_attention_varlen(handle, spec_b, shape, cq, ck, cv, co, cu_q.data_ptr(), cu_kv.data_ptr(),
                                              _scale(softmax_scale), lse_ptr, stream),
              "qattn_attention_varlen")
    return out


def attention_over_cache(runtime, q, cu_seqlens_q, max_seqlen_q, cache_spec, cache, kv_lens, max_kv_len, spec, out,
                         softmax_scale, lse):
    """The body of Runtime.attention_over_cache (qattn_cache_prefill): packed queries over each
    sequence's first kv_lens[b] rows of a KV cache."""
    from .decode import KvCache, _heads_kv_of
    from .runtime import _torch, _encode, _scale, _check_same_device
    torch = _torch()
    _encode(spec, "spec")
    spec_b = _encode(checks.with_varlen(spec), "spec")
    cache_spec_b = _encode(cache_spec, "cache_spec")
    if not isinstance(cache, KvCache):
        raise BadInput(f"cache must be a qattn.KvCache, not {type(cache).__name__}")
    q, cq, dq = _packed(torch, spec, "q", q)
    heads_q = dq[1]
    d = checks.spec_head_dim(spec)
    if d is not None and d != dq[2]:
        raise BadInput(f"q has head dim {dq[2]} but the spec says d={d}")
    heads_kv = _heads_kv_of(cache_spec, heads_q)
    cu_q, batch = _offsets(torch, "cu_seqlens_q", cu_seqlens_q)
    lens = _tensor(torch, "kv_lens", kv_lens)
    if lens.dtype != torch.int32 or tuple(lens.shape) != (batch,) or not lens.is_contiguous():
        raise BadInput(f"kv_lens must be a contiguous int32 CUDA tensor [{batch}] (cu_seqlens_q has {batch + 1} entries)")
    q_len = checks.check_max_seqlen("max_seqlen_q", max_seqlen_q)
    kv_len = checks.check_max_seqlen("max_kv_len", max_kv_len)
    out, co, lse = _outputs(torch, spec, q, dq, heads_q, out, lse)
    lse_ptr = None if lse is None else lse.data_ptr()
    named = [("q", q), ("cu_seqlens_q", cu_q), ("kv_lens", lens), ("out", out)]
    _check_same_device(runtime, named + ([("lse", lse)] if lse is not None else []))
    shape = _library.Shape(batch, heads_q, heads_kv, q_len, kv_len)
    lib = runtime._lib
    stream = torch.cuda.current_stream(runtime.device).cuda_stream
    args = _library.CachePrefillArgs()
    check(lib, lib.qattn_cache_prefill_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_cache_prefill_args_init")
    args.spec, args.cache_spec, args.shape, args.q, args.o = spec_b, cache_spec_b, shape, cq, co
    args.cu_seqlens_q, args.cache, args.kv_lens = cu_q.data_ptr(), cache.c, lens.data_ptr()
    args.lse, args.softmax_scale, args.k_mean = lse_ptr, _scale(softmax_scale), cache.k_mean
    with runtime._call() as handle:
        check(lib, lib.qattn_cache_prefill(handle, ctypes.byref(args), stream), "qattn_cache_prefill")
    return out
