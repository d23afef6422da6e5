"""The linear call behind the qattn::linear op (qattn.torch.linear, QuantLinear): planned once per call
shape (a qattn linear plan: dataflow for m, tiling, split-K decided and the kernel loaded), then per call
the output and, with split-K, a zeroed workspace from torch's allocator (stream-ordered: any stream and
CUDA-graph capture are safe), and one qattn_linear_plan_run with the data pointers.

The checks are Runtime.linear's (python/qattn/linear.py, linear_args); a plan is kept for a key that
holds everything they read.
"""
import torch

from .. import _library
from .. import linear as _linear
from ..errors import BadInput
from . import _device, _prefill

_plans = {}
_device.register_plan_cache(_plans)

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def spec_fields(spec):
    """(n, output dtype) of a linear spec text, for the op's fake implementation and its checks."""
    if not isinstance(spec, str):
        raise BadInput(f"spec must be a str, not {type(spec).__name__}")
    fields = dict(t.split("=", 1) for t in spec.split() if "=" in t)
    if not spec.split() or spec.split()[0] != "linear" or "n" not in fields or fields.get("out") not in _DTYPES:
        raise BadInput(f"'{spec}' is not a linear spec (linear a=... w=... out=<fp16|bf16> n=... k=...)")
    try:
        return int(fields["n"]), _DTYPES[fields["out"]]
    except ValueError:
        raise BadInput(f"n={fields['n']} is not an integer") from None


def _key(t):
    return None if t is None else (t.dtype, t.is_cuda, t.get_device(), t.shape, t.stride())


def _make(a, w, w_scale, w_zero, bias, out, spec):
    index = _device.device_index(a)
    rt = _device.runtime(index)
    args = _linear.linear_args(rt, spec, a, w, out, w_scale=w_scale, w_zero=w_zero, bias=bias)
    return _device.make_plan(rt, index, args, "linear")


def run(a, w, w_scale, w_zero, bias, spec):
    """C = a . W^T (+ bias) for a linear spec, a new contiguous [m, n] tensor, on torch's current stream."""
    n, dtype = spec_fields(spec)
    if not isinstance(a, torch.Tensor) or a.dim() != 2:
        raise BadInput("a must be a 2-d CUDA tensor [m, k]")
    out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
    try:
        key = (spec, _key(a), _key(w), _key(w_scale), _key(w_zero), _key(bias))
    except (TypeError, ValueError):   # the checks say what is wrong
        key = None
    p = _prefill.cached(key, lambda: _make(a, w, w_scale, w_zero, bias, out, spec), _plans)
    ws = torch.zeros(p.workspace_bytes, dtype=torch.uint8, device=p.device) if p.workspace_bytes else None
    args = _library.LinearArgs.from_buffer_copy(p.args)
    args.a, args.w, args.c = a.data_ptr(), w.data_ptr(), out.data_ptr()
    args.w_scale = None if w_scale is None else w_scale.data_ptr()
    args.w_zero = None if w_zero is None else w_zero.data_ptr()
    args.bias = None if bias is None else bias.data_ptr()
    p.run(args, ws, _prefill.stream_of(p.index))
    return out
