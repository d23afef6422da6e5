"""The decode call behind the qattn::decode op (KvCache.decode): planned once per call shape (a qattn decode
plan: kernels, split count and workspace decided for the bound max_kv_len), then per call only the output
and workspace allocations (torch's allocator, so that CUDA graphs and memory stats see them) and one
qattn_decode_plan_run with the data pointers. A plan run needs no earlier eager call, so a step may be
captured in a CUDA graph the first time it runs.

The checks are Runtime.decode's (python/qattn/decode.py, decode_args); the plan remembers their outcome
for a key that holds everything they read.
"""
import torch

from .. import _library
from .. import decode as _decode
from . import _device, _prefill

_plans = {}
_device.register_plan_cache(_plans)


def _tensor_key(t):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError("not a tensor")
    return (t.dtype, t.is_cuda, t.get_device(), t.shape, t.stride())


def _make(q, view, kv_lens, max_kv_len, spec):
    index = _device.device_index(q)
    rt = _device.runtime(index)
    args, _ = _decode.decode_args(rt, spec, q, view, kv_lens, None, None, None, 0, None, None, max_kv_len)
    return _device.make_plan(rt, index, args, "decode")


def run(q, view, kv_lens, max_kv_len, spec, scale, tensors):
    """out of decode(q) over the cache `view` (a qattn.KvCache over `tensors`: k, v, block_table,
    k_head_scale, v_head_scale) on torch's current stream, through a plan per call shape. scale: 0.0 for
    1/sqrt(d)."""
    try:
        key = (spec, int(max_kv_len), view.c.capacity, view.c.page_size, _tensor_key(q), _tensor_key(kv_lens)) + \
            tuple(_tensor_key(t) for t in tensors)
    except (TypeError, ValueError):   # the checks say what is wrong
        key = None
    p = _prefill.cached(key, lambda: _make(q, view, kv_lens, max_kv_len, spec), _plans)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    ws = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=p.device) if p.workspace_bytes else None
    a = _library.DecodeArgs.from_buffer_copy(p.args)
    a.q.data, a.o.data = q.data_ptr(), out.data_ptr()
    c = view.c
    a.cache.k, a.cache.v, a.cache.block_table = c.k, c.v, c.block_table
    a.cache.k_head_scale, a.cache.v_head_scale = c.k_head_scale, c.v_head_scale
    a.kv_lens = kv_lens.data_ptr()
    a.softmax_scale = scale
    p.run(a, ws, _prefill.stream_of(p.index))
    return out
