"""The prefill call behind qattn.torch.attention and the qattn::attention op: validated and planned once
per call shape (a qattn attention plan: kernels loaded, passes and workspace decided), then per call
only the output and workspace allocations (torch's allocator, so that CUDA graphs and memory stats see
them) and one C call with the data pointers.

The checks are Runtime.attention's (python/qattn/runtime.py); the plan remembers their outcome for a
key that holds everything they read: spec, layout, dtypes, devices, shapes and strides.
"""
import ctypes

import torch

from .. import _library
from .. import layout as checks
from ..errors import BadInput, check
from . import _device

MAX_PLANS = 4096   # distinct call shapes kept; past it the table starts over (plans are cheap to remake)
_plans = {}
_device.register_plan_cache(_plans)


class _Plan:
    __slots__ = ("runtime", "device", "index", "handle", "workspace_bytes", "out_shape", "lse_shape", "_destroy")

    def __init__(self, runtime, device, handle, workspace_bytes, out_shape, lse_shape):
        self.runtime = runtime
        self.device, self.index = device, device.index
        self.handle = handle
        self.workspace_bytes = workspace_bytes
        self.out_shape = out_shape
        self.lse_shape = lse_shape
        self._destroy = runtime._lib.qattn_attention_plan_destroy

    def __del__(self):
        if self.handle is not None:
            self._destroy(self.handle)
            self.handle = None


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _create(rt, index, spec_b, shape, cq, ck, cv, co, flags, out_shape=None, lse_shape=None):
    """A _Plan over qattn_attention_plan_create with the caller's workspace (every run passes one)."""
    handle, ws = ctypes.c_void_p(), ctypes.c_int64()
    lib = rt._lib
    with rt._call() as rt_handle:
        check(lib, lib.qattn_attention_plan_create(rt_handle, spec_b, shape, cq, ck, cv, co,
                                                   flags | _library.PLAN_CALLER_WORKSPACE, ctypes.byref(handle)),
              "qattn_attention_plan_create")
    p = _Plan(rt, torch.device("cuda", index), handle.value, 0, out_shape, lse_shape)
    check(lib, lib.qattn_attention_plan_workspace_bytes(p.handle, ctypes.byref(ws)), "qattn_attention_plan_workspace_bytes")
    p.workspace_bytes = ws.value
    return p


def cached(key, make, plans=_plans):
    """The plan stored in `plans` under `key` (None: never stored), else make() stored there."""
    p = plans.get(key) if key is not None else None
    if p is None:
        p = make()
        if key is not None:
            if len(plans) >= MAX_PLANS:
                plans.clear()
            plans[key] = p
    return p


def _make_plan(q, k, v, spec, layout):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise BadInput(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    index = _device.device_index(q)
    rt = _device.runtime(index)
    spec_b, dq, dk, dv, shape = rt._describe_inputs(q, k, v, spec, layout)
    out_shape = tuple(q.shape)
    _, out_strides = checks.decompose("out", out_shape, _contiguous_strides(out_shape), layout)
    batch, q_len, heads_q, _ = dq.dims
    return _create(rt, index, spec_b, shape, dq.c, dk.c, dv.c, _library.Tensor(None, *out_strides), 0, out_shape,
                   (batch, heads_q, q_len))


def _make_varlen_plan(q, k, v, cu_q, cu_kv, max_q, max_kv, spec):
    from .. import varlen
    index = _device.device_index(q)
    rt = _device.runtime(index)
    spec_b, (cq, ck, cv), (_, heads_q, d), shape, _ = varlen.describe(rt, q, k, v, cu_q, cu_kv, max_q, max_kv, spec)
    return _create(rt, index, spec_b, shape, cq, ck, cv, _library.Tensor(None, 0, d, heads_q * d), _library.PLAN_VARLEN)


def run_varlen(q, k, v, cu_q, cu_kv, max_q, max_kv, spec, scale):
    """out of a variable-length call (packed [tokens, heads, d] tensors, int32 offsets [batch + 1] on the
    device; max_q / max_kv bound the lengths), through a plan per (spec, bounds, shapes, strides)."""
    try:
        key = ("varlen", spec, int(max_q), int(max_kv), cu_q.shape, cu_q.dtype, cu_kv.dtype) + plan_key(q, k, v)
    except (AttributeError, TypeError, ValueError):   # not tensors or ints: the checks say which
        key = None
    p = cached(key, lambda: _make_varlen_plan(q, k, v, cu_q, cu_kv, max_q, max_kv, spec))
    if not (cu_q.is_cuda and cu_kv.is_cuda and cu_q.is_contiguous() and cu_kv.is_contiguous()
            and cu_q.get_device() == cu_kv.get_device() == p.index):
        raise BadInput("cu_seqlens_q and cu_seqlens_kv must be contiguous int32 CUDA tensors on q's device")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _run_plan(p, q, k, v, out, None, cu_q.data_ptr(), cu_kv.data_ptr(), scale)
    return out


def plan_key(q, k, v):
    """What a plan's checks read of the tensors (AttributeError for a non-tensor)."""
    return (q.dtype, k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(), q.shape, q.stride(),
            k.shape, k.stride(), v.shape, v.stride())


def plan(q, k, v, spec, layout, key=None):
    """The validated plan of attention(q, k, v) for `spec` in `layout` (BadInput when it is refused)."""
    if key is None:
        try:
            key = (spec, layout) + plan_key(q, k, v)
        except AttributeError:
            key = None
    return cached(key, lambda: _make_plan(q, k, v, spec, layout))


# The current stream's handle: torch's own fast accessor where it has one.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(index):
    """torch's current stream on device `index`, as a handle."""
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream


def launch(p, q, k, v, scale, with_lse=False):
    """Runs a plan on q, k, v (the tensors it was made for, or ones of the same key) on torch's current
    stream: out, or (out, lse) with with_lse."""
    out = torch.empty(p.out_shape, dtype=q.dtype, device=p.device)
    lse = torch.empty(p.lse_shape, dtype=torch.float32, device=p.device) if with_lse else None
    _run_plan(p, q, k, v, out, lse, None, None, scale)
    return (out, lse) if with_lse else out


def _run_plan(p, q, k, v, out, lse, cu_q, cu_kv, scale):
    """One qattn_attention_plan_run with a workspace from torch's allocator (stream-ordered, so any
    stream and CUDA-graph capture are safe)."""
    rt = p.runtime
    ws = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=p.device) if p.workspace_bytes else None
    handle = _device.open_handle(rt)
    status = rt._lib.qattn_attention_plan_run(handle, p.handle, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                              out.data_ptr(), None if lse is None else lse.data_ptr(), cu_q, cu_kv,
                                              scale, None if ws is None else ws.data_ptr(), stream_of(p.index))
    if status:
        check(rt._lib, status, "qattn_attention_plan_run")


def run(q, k, v, spec, layout, scale, with_lse=False):
    """out (and lse when with_lse) of attention(q, k, v) for `spec`, on torch's current stream.

    scale: 0.0 for 1/sqrt(d). out: a new contiguous tensor in q's shape; lse: float32 [b, hq, s_q]."""
    return launch(plan(q, k, v, spec, layout), q, k, v, scale, with_lse)
