"""The prefill call behind qattn.torch.attention and the qattn::attention op: validated once per call
shape (a plan), then per call only the data pointers, the output allocation and one C call.

The checks are Runtime.attention's (python/qattn/runtime.py); the plan remembers their outcome for a
key that holds everything they read: spec, layout, dtypes, devices, shapes and strides.
"""
import torch

from .. import _library
from .. import layout as checks
from ..errors import BadInput, check
from . import _device

MAX_PLANS = 4096   # distinct call shapes kept; past it the table starts over (plans are cheap to remake)
_plans = {}
_device.register_plan_cache(_plans)


class _Plan:
    __slots__ = ("runtime", "device", "index", "spec_b", "shape", "q", "k", "v", "out_shape", "out", "lse_shape")

    def __init__(self, runtime, device, spec_b, shape, strides, out_shape, out_strides, lse_shape):
        self.runtime = runtime
        self.device, self.index = device, device.index
        self.spec_b = spec_b
        self.shape = shape
        self.q, self.k, self.v = strides
        self.out_shape = out_shape
        self.out = out_strides
        self.lse_shape = lse_shape


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


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
    strides = tuple((d.c.sb, d.c.sh, d.c.ss) for d in (dq, dk, dv))
    return _Plan(rt, torch.device("cuda", index), spec_b, shape, strides, out_shape, out_strides,
                 (batch, heads_q, q_len))


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
    p = _plans.get(key) if key is not None else None
    if p is None:
        p = _make_plan(q, k, v, spec, layout)
        if key is not None:
            if len(_plans) >= MAX_PLANS:
                _plans.clear()
            _plans[key] = p
    return p


# The current stream's handle: torch's own fast accessor where it has one.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(index):
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream


def launch(p, q, k, v, scale, with_lse=False):
    """Runs a plan on q, k, v (the tensors it was made for, or ones of the same key) on torch's current
    stream: out, or (out, lse) with with_lse."""
    rt = p.runtime
    out = torch.empty(p.out_shape, dtype=q.dtype, device=p.device)
    lse = torch.empty(p.lse_shape, dtype=torch.float32, device=p.device) if with_lse else None
    handle = rt._handle
    if handle is None:
        raise BadInput("the qattn Runtime of this device was closed; give the torch calls another with "
                       "qattn.torch.set_runtime")
    tensor = _library.Tensor
    status = rt._lib.qattn_attention(handle, p.spec_b, p.shape, tensor(q.data_ptr(), *p.q), tensor(k.data_ptr(), *p.k),
                                     tensor(v.data_ptr(), *p.v), tensor(out.data_ptr(), *p.out), scale,
                                     None if lse is None else lse.data_ptr(), _stream(p.index))
    if status:
        check(rt._lib, status, "qattn_attention")
    return (out, lse) if with_lse else out


def run(q, k, v, spec, layout, scale, with_lse=False):
    """out (and lse when with_lse) of attention(q, k, v) for `spec`, on torch's current stream.

    scale: 0.0 for 1/sqrt(d). out: a new contiguous tensor in q's shape; lse: float32 [b, hq, s_q]."""
    return launch(plan(q, k, v, spec, layout), q, k, v, scale, with_lse)
