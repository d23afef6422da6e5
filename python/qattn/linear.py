"""Linear layers from Python: the bodies of Runtime.linear / Runtime.linear_route over the C API
(qattn_linear, qattn_linear_route). C[m, n] = A[m, k] . W[n, k]^T (+ bias) for a spec
`linear a=<fp16|bf16> w=<fmt> out=<fp16|bf16> n=<N> k=<K> [bias] [flow=auto|gemv|flat|gemm]`; the weight
layouts are those of include/qattn/linear.hpp (int8: [n, k] codes and a scale per row; int4: [n, k/2]
bytes, the low nibble the even k, with a scale and a zero point per 128 k).

Tensors are CUDA tensors (or raw device addresses as ints); a and c are 2-d with unit column stride,
their row strides passed on. The call runs on torch's current stream when torch is loaded, else on the
legacy default stream.
"""
import ctypes

from . import _library
from .decode import _address, _spec_bytes
from .errors import BadInput, QattnError, check


def _rows(name, value):
    """(address, row stride in elements, rows) of a 2-d tensor with unit column stride, or (int, 0, None)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, 0, None
    address = _address(name, value)
    if value.dim() != 2 or value.stride(1) != 1:
        raise BadInput(f"{name} must be a 2-d tensor with contiguous rows, got shape {tuple(value.shape)} and strides "
                       f"{tuple(value.stride())}")
    return address, value.stride(0), value.shape[0]


def linear_args(runtime, spec, a, w, c, m=None, w_scale=None, w_zero=None, bias=None, splits=0, tiling=None,
                lda=0, ldw=0, ldc=0):
    lib = runtime._lib
    args = _library.LinearArgs()
    check(lib, lib.qattn_linear_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_linear_args_init")
    args.spec = _spec_bytes(spec)
    args.a, a_ld, a_rows = _rows("a", a)
    args.c, c_ld, c_rows = _rows("c", c)
    args.lda, args.ldc = lda or a_ld, ldc or c_ld
    if m is None:
        if a_rows is None:
            raise BadInput("m (tokens) is needed when a is a device address")
        m = a_rows
    if c_rows is not None and c_rows < m:
        raise BadInput(f"c has {c_rows} rows for m={m} tokens")
    if isinstance(m, bool) or not isinstance(m, int):
        raise BadInput(f"m must be an int, not {type(m).__name__}")
    args.m = m
    args.w = _address("w", w)
    args.ldw = ldw
    args.w_scale = _address("w_scale", w_scale, allow_none=True)
    args.w_zero = _address("w_zero", w_zero, allow_none=True)
    args.bias = _address("bias", bias, allow_none=True)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 0:
        raise BadInput(f"splits must be an int >= 0 (0: chosen), not {splits!r}")
    args.splits = splits
    args.tiling = tiling.encode("utf-8") if tiling else None
    return args


def _stream(runtime):
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream(runtime.device).cuda_stream
    return None


def linear(runtime, spec, a, w, c, **kw):
    args = linear_args(runtime, spec, a, w, c, **kw)
    with runtime._call() as handle:
        check(runtime._lib, runtime._lib.qattn_linear(handle, ctypes.byref(args), _stream(runtime)), "qattn_linear")
    return c


def linear_route(runtime, spec, a, w, c, **kw):
    """(kernel name, dataflow, split count) that linear() runs for these arguments."""
    args = linear_args(runtime, spec, a, w, c, **kw)
    name, flow, splits = ctypes.create_string_buffer(256), ctypes.create_string_buffer(16), ctypes.c_int(0)
    with runtime._call() as handle:
        check(runtime._lib, runtime._lib.qattn_linear_route(handle, ctypes.byref(args), name, 256, flow, 16,
                                                            ctypes.byref(splits)), "qattn_linear_route")
    return name.value.decode(), flow.value.decode(), splits.value


def tune(runtime, spec, rows=None):
    """Runtime.tune_linear: the sweep's table as a dict (JSON of kind linear_dataflow)."""
    import json
    lib = runtime._lib
    rows = list(rows or [])
    if any(isinstance(r, bool) or not isinstance(r, int) for r in rows):
        raise BadInput("rows must be a list of ints (token counts 1..8192)")
    array = (ctypes.c_int * len(rows))(*rows) if rows else None
    # One sweep: its table (a few KB for the default rows) fits this buffer many times over.
    buf, size = ctypes.create_string_buffer(1 << 20), ctypes.c_size_t(0)
    with runtime._call() as handle:
        check(lib, lib.qattn_tune_linear(handle, _spec_bytes(spec), array, len(rows), buf, len(buf), ctypes.byref(size)),
              "qattn_tune_linear")
    if size.value > len(buf):
        raise QattnError(f"qattn_tune_linear's table needs {size.value} bytes; the sweep stored it in the cache")
    return json.loads(buf.value.decode())


def pack_weight(w, fmt):
    """Weights for a linear spec from a float CUDA (or CPU) tensor w [n, k], with torch: returns
    (w, scale, zero) for w=<fmt>, code for code as qattn::pack_linear_weight (include/qattn/linear.hpp):
      "fp16" / "bf16":    (w in that type, None, None)
      "int8:per_channel": int8 codes [n, k], float32 scale [n] = max|w[n]| / 127
      "int4:per_group":   uint8 [n, k / 2] (low nibble: even k), float32 scale and zero [n, k / 128]
                          (W = (code - zero) * scale; each group's range holds 0)."""
    import torch
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise BadInput("w must be a 2-d tensor [n, k]")
    w = w.float()
    if fmt in ("fp16", "bf16"):
        return w.to(torch.float16 if fmt == "fp16" else torch.bfloat16).contiguous(), None, None
    if fmt == "int8:per_channel":
        amax = w.abs().amax(dim=1)
        scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
        codes = torch.clamp(torch.round(w / scale[:, None]), -127, 127).to(torch.int8)
        return codes.contiguous(), scale.contiguous(), None
    if fmt == "int4:per_group":
        n, k = w.shape
        if k % 128:
            raise BadInput(f"int4:per_group needs k a multiple of 128, got {k}")
        g = w.view(n, k // 128, 128)
        lo = torch.clamp(g.amin(dim=2), max=0.0)
        hi = torch.clamp(g.amax(dim=2), min=0.0)
        scale = torch.where(hi > lo, (hi - lo) / 15.0, torch.ones_like(hi))
        zero = torch.clamp(torch.round(-lo / scale), 0, 15)
        codes = torch.clamp(torch.round(g / scale[..., None]) + zero[..., None], 0, 15).to(torch.uint8).view(n, k)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
        return packed, scale.contiguous(), zero.contiguous()
    raise BadInput(f"unknown weight format {fmt!r}; accepted: fp16, bf16, int8:per_channel, int4:per_group")


def unpack_weight(w, scale, zero, fmt):
    """The float64 weights [n, k] the kernels see for pack_weight's output."""
    if fmt in ("fp16", "bf16"):
        return w.double()
    if fmt == "int8:per_channel":
        return w.double() * scale.double()[:, None]
    lo, hi = (w & 15).long(), (w >> 4).long()
    codes = lo.new_empty(w.shape[0], w.shape[1] * 2)
    codes[:, 0::2], codes[:, 1::2] = lo, hi
    n, k = codes.shape
    g = codes.view(n, k // 128, 128).double()
    return ((g - zero.double()[..., None]) * scale.double()[..., None]).view(n, k)
