"""Decode over a KV cache from Python: the cache description (KvCache), its sizes, and the bodies of
Runtime.append_kv / Runtime.decode over the C API (qattn_append_kv, qattn_decode); decode_args is also
what qattn.torch's decode plans are made from.

The cache's bytes are the caller's (a torch uint8 tensor, or any CUDA tensor, or a raw device address):
qattn writes and reads them in the layout of templates/qattn/decode/kv_layout.h.
"""
import ctypes

from . import _library
from .errors import BadInput, check


def _spec_bytes(spec):
    if not isinstance(spec, str):
        raise BadInput(f"spec must be a str, not {type(spec).__name__}")
    return spec.encode("utf-8")


def _address(name, value, allow_none=False):
    """A device address from a CUDA tensor or an int (None stays None when allowed)."""
    if value is None:
        if allow_none:
            return None
        raise BadInput(f"{name} is None; pass a CUDA tensor or a device address (int)")
    if isinstance(value, bool):
        raise BadInput(f"{name} must be a CUDA tensor or a device address (int), not bool")
    if isinstance(value, int):
        return value
    if hasattr(value, "data_ptr") and hasattr(value, "is_cuda"):
        if not value.is_cuda:
            raise BadInput(f"{name} is on {value.device}; the KV cache lives on a CUDA device")
        return value.data_ptr()
    raise BadInput(f"{name} must be a CUDA tensor or a device address (int), not {type(value).__name__}")


def kv_row_bytes(spec):
    """Bytes of one cache row (one token of one KV head) of a decode spec's format (not flashq)."""
    lib = _library.load()
    out = ctypes.c_int64(0)
    check(lib, lib.qattn_kv_row_bytes(_spec_bytes(spec), ctypes.byref(out)), "qattn_kv_row_bytes")
    return out.value


def kv_cache_bytes(spec, batch, heads_kv, capacity):
    """Bytes of one contiguous K (or V) cache of `capacity` tokens for batch x heads_kv; a paged cache of
    P pages takes kv_cache_bytes(spec, P, heads_kv, page_size)."""
    lib = _library.load()
    out = ctypes.c_int64(0)
    check(lib, lib.qattn_kv_cache_bytes(_spec_bytes(spec), int(batch), int(heads_kv), int(capacity),
                                        ctypes.byref(out)), "qattn_kv_cache_bytes")
    return out.value


class KvCache:
    """A K and a V cache on the device (every decode format but flashq).

    Contiguous: capacity tokens per sequence. Paged: page_size tokens per page and block_table, an int32
    CUDA tensor [batch, pages per sequence] of page ids (table_stride = its row length). fp8e4m3:per_head
    caches need k_head_scale and v_head_scale (float32 CUDA tensors [heads_kv]). k_mean: a K-smoothed
    cache's vector, a float32 CUDA tensor [heads_kv, d] (the K rows hold k - k_mean; set it with an append's
    init_k_mean=True). Strides in bytes, 0: the defaults. The tensors are kept referenced for the object's
    life."""

    def __init__(self, k, v, capacity=0, page_size=0, block_table=None, k_head_scale=None, v_head_scale=None,
                 head_stride=0, page_stride=0, k_mean=None):
        self._keep = (k, v, block_table, k_head_scale, v_head_scale, k_mean)
        if hasattr(k_mean, "dim") and (str(k_mean.dtype) != "torch.float32" or k_mean.dim() != 2
                                       or not k_mean.is_contiguous()):
            raise BadInput("k_mean must be a contiguous float32 CUDA tensor [heads_kv, d] (or a device address)")
        self.k_mean = _address("k_mean", k_mean, True)
        table_stride = 0
        if block_table is not None:
            shape = tuple(getattr(block_table, "shape", ()))
            if len(shape) != 2 or not block_table.is_contiguous() or str(block_table.dtype) != "torch.int32":
                raise BadInput("block_table must be a contiguous int32 CUDA tensor [batch, pages per sequence]")
            table_stride = shape[1]
        self.c = _library.KvCache(_address("k", k), _address("v", v), int(page_stride), int(head_stride),
                                  int(capacity), int(page_size), _address("block_table", block_table, True),
                                  int(table_stride), _address("k_head_scale", k_head_scale, True),
                                  _address("v_head_scale", v_head_scale, True))


def _bhsd(name, tensor, torch):
    """qattn_tensor of a [b, h, s, d] CUDA tensor (element strides; the last one must be 1)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda:
        raise BadInput(f"{name} must be a CUDA torch.Tensor [b, h, s, d]")
    if tensor.dim() != 4 or tensor.stride(3) != 1:
        raise BadInput(f"{name} must be 4-d [b, h, s, d] with a contiguous last dimension, got shape "
                       f"{tuple(tensor.shape)} strides {tensor.stride()}")
    return _library.Tensor(tensor.data_ptr(), tensor.stride(0), tensor.stride(1), tensor.stride(2))


def _int32_vector(name, tensor, batch, torch):
    if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda or tensor.dtype != torch.int32 \
            or tuple(tensor.shape) != (batch,) or not tensor.is_contiguous():
        raise BadInput(f"{name} must be a contiguous int32 CUDA tensor of shape [{batch}]")
    return tensor.data_ptr()


def same_strides(a, b):
    """Whether a and b (one shape) step alike along every dimension of size > 1: the append call reads
    both with one set of strides, and a size-1 dimension's stride is never used."""
    return all(sa == sb for sa, sb, n in zip(a.stride(), b.stride(), a.shape) if n > 1)


def _cache_of(cache):
    if not isinstance(cache, KvCache):
        raise BadInput(f"cache must be a qattn.KvCache, not {type(cache).__name__}")
    return cache.c


def append_kv(runtime, spec, k, v, cache, start, init_k_mean=False):
    from .runtime import _torch
    torch = _torch()
    ck, cv = _bhsd("k", k, torch), _bhsd("v", v, torch)
    if tuple(k.shape) != tuple(v.shape):
        raise BadInput(f"k and v have shapes {tuple(k.shape)} and {tuple(v.shape)}; they must be one")
    args = _append_args(runtime, spec, k, v, ck, cv, cache, init_k_mean)
    args.batch, args.heads_kv, args.n_new = k.shape[0], k.shape[1], k.shape[2]
    args.start = _int32_vector("start", start, k.shape[0], torch)
    _append(runtime, args, torch)


def append_kv_slots(runtime, spec, k, v, cache, slot_mapping, num_slots, init_k_mean=False):
    """k, v: [tokens, heads_kv, d]; slot_mapping: int64 CUDA tensor [tokens] (cache row of each token:
    page * page_size + offset, or sequence * capacity + position; -1 skips a token)."""
    from .runtime import _torch
    torch = _torch()
    if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor) or k.dim() != 3 or v.dim() != 3:
        raise BadInput("k and v must be 3-d CUDA tensors [tokens, heads_kv, d] for a slot-mapping append")
    if tuple(k.shape) != tuple(v.shape):
        raise BadInput(f"k and v have shapes {tuple(k.shape)} and {tuple(v.shape)}; they must be one")
    ck, cv = (_bhsd(name, t.unsqueeze(0).transpose(1, 2), torch) for name, t in (("k", k), ("v", v)))
    args = _append_args(runtime, spec, k, v, ck, cv, cache, init_k_mean)
    args.batch, args.heads_kv, args.n_new = 1, k.shape[1], k.shape[0]
    if not isinstance(slot_mapping, torch.Tensor) or not slot_mapping.is_cuda or slot_mapping.dtype != torch.int64 \
            or tuple(slot_mapping.shape) != (k.shape[0],) or not slot_mapping.is_contiguous():
        raise BadInput(f"slot_mapping must be a contiguous int64 CUDA tensor of shape [{k.shape[0]}] (one cache row "
                       f"per token, -1 to skip one)")
    args.slot_mapping = slot_mapping.data_ptr()
    args.num_slots = _positive("num_slots", num_slots)
    _append(runtime, args, torch)


def _append_args(runtime, spec, k, v, ck, cv, cache, init_k_mean):
    lib = runtime._lib
    args = _library.AppendArgs()
    check(lib, lib.qattn_append_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_append_args_init")
    args.spec = _spec_bytes(spec)
    args.k, args.v = ck.data, cv.data
    if not same_strides(k, v):
        raise BadInput(f"k and v must have the same strides (size-1 dimensions aside), got {k.stride()} and "
                       f"{v.stride()}")
    args.sb, args.sh, args.ss = ck.sb, ck.sh, ck.ss
    args.cache = _cache_of(cache)
    args.k_mean = cache.k_mean
    args.init_k_mean = 1 if init_k_mean else 0
    return args


def _append(runtime, args, torch):
    lib = runtime._lib
    stream = torch.cuda.current_stream(runtime.device).cuda_stream
    with runtime._call() as handle:
        check(lib, lib.qattn_append_kv(handle, ctypes.byref(args), stream), "qattn_append_kv")


def decode(runtime, spec, q, cache, kv_lens, out, lse, softmax_scale, splits, unified_max, tiling, max_kv_len=None):
    from .runtime import _torch
    torch = _torch()
    args, out = decode_args(runtime, spec, q, cache, kv_lens, out, lse, softmax_scale, splits, unified_max, tiling,
                            max_kv_len)
    lib = runtime._lib
    stream = torch.cuda.current_stream(runtime.device).cuda_stream
    with runtime._call() as handle:
        check(lib, lib.qattn_decode(handle, ctypes.byref(args), stream), "qattn_decode")
    return out


def decode_args(runtime, spec, q, cache, kv_lens, out, lse, softmax_scale, splits, unified_max, tiling,
                max_kv_len=None):
    """The checked qattn_decode_args of a decode call, and its output (`out`, or a new tensor like q)."""
    from .runtime import _torch
    torch = _torch()
    lib = runtime._lib
    args = _library.DecodeArgs()
    check(lib, lib.qattn_decode_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_decode_args_init")
    spec_b = _spec_bytes(spec)
    tiling_b = None if tiling is None else _spec_bytes(tiling)
    args.spec, args.tiling = spec_b, tiling_b
    args.q = _bhsd("q", q, torch)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if tuple(out.shape) != tuple(q.shape) or out.dtype != q.dtype:
        raise BadInput(f"out must have q's shape {tuple(q.shape)} and dtype {q.dtype}")
    args.o = _bhsd("out", out, torch)
    batch, heads_q, q_len = q.shape[0], q.shape[1], q.shape[2]
    args.cache = _cache_of(cache)
    args.k_mean = cache.k_mean
    args.kv_lens = _int32_vector("kv_lens", kv_lens, batch, torch)
    heads_kv = _heads_kv_of(spec, heads_q)
    # The bound sizes the splits. Read from the device when not given: one small synchronizing copy,
    # which a CUDA-graph capture cannot hold, so captured callers pass it.
    max_len = int(kv_lens.max().item()) if max_kv_len is None else _positive("max_kv_len", max_kv_len)
    args.shape = _library.Shape(batch, heads_q, heads_kv, q_len, max_len)
    if lse is not None:
        if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or not lse.is_cuda \
                or tuple(lse.shape) != (batch, heads_q, q_len) or not lse.is_contiguous():
            raise BadInput(f"lse must be a contiguous float32 CUDA tensor [{batch}, {heads_q}, {q_len}]")
        args.lse = lse.data_ptr()
    args.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    args.splits = int(splits)
    if unified_max is not None:
        phi, lo, hi = unified_max
        args.unified_max = _library.UnifiedMax(float(phi), float(lo), float(hi), 1)
    return args, out


def _positive(name, value):
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 1:
        raise BadInput(f"{name} must be an int >= 1 (a bound on every kv_lens entry), got {value!r}")
    return value.__index__()


def _heads_kv_of(spec, heads_q):
    """heads_kv from the spec's gqa= token (1 when absent)."""
    gqa = 1
    for token in spec.split():
        if token.startswith("gqa="):
            try:
                gqa = int(token[4:])
            except ValueError:
                raise BadInput(f"gqa= in the spec must be an integer, got '{token}'") from None
    if gqa < 1 or heads_q % gqa:
        raise BadInput(f"q has {heads_q} heads, not a multiple of the spec's gqa={gqa}")
    return heads_q // gqa
