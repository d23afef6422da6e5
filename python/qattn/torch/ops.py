"""qattn's torch.library custom ops, with fake (meta) implementations so that torch.compile traces
them without a graph break and torch.export sees their output shapes.

    torch.ops.qattn.attention(q, k, v, spec, layout, scale) -> out
    torch.ops.qattn.attention_lse(q, k, v, spec, layout, scale) -> (out, lse)
    torch.ops.qattn.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
                                     spec, scale) -> out
    torch.ops.qattn.append_kv(k_cache, v_cache, k, v, start, block_table, k_head_scale, v_head_scale,
                              capacity, page_size, spec, k_mean, init_k_mean) -> ()   (writes k_cache and v_cache,
                                                                                      and k_mean when init_k_mean)
    torch.ops.qattn.append_kv_slots(k_cache, v_cache, k, v, slot_mapping, block_table, k_head_scale,
                                    v_head_scale, capacity, page_size, num_slots, spec, k_mean, init_k_mean) -> ()
    torch.ops.qattn.prefill_cache(q, cu_seqlens_q, kv_lens, k_cache, v_cache, block_table, k_head_scale,
                                  v_head_scale, capacity, page_size, max_seqlen_q, max_kv_len, cache_spec,
                                  spec, scale) -> out
    torch.ops.qattn.decode(q, k_cache, v_cache, kv_lens, block_table, k_head_scale, v_head_scale,
                           capacity, page_size, max_kv_len, spec, scale) -> out
    torch.ops.qattn.linear(a, w, w_scale, w_zero, bias, spec) -> c   (a [m, k]; c [m, n] of out='s type)
    torch.ops.qattn.flashq_append(cache, block_table, k, v, bits, page_stride, max_blocks, spec) -> ()
    torch.ops.qattn.flashq_decode(q, cache, block_table, bits, page_stride, max_blocks, max_kv_len, spec,
                                  scale) -> out
        (cache: a FlashQ cache's tensors, qattn.torch.FlashQCache.tensors; bits: K's then V's widths)

scale 0.0 means 1/sqrt(d). Outputs are new contiguous tensors: out in q's shape and dtype, lse float32
[b, hq, s_q] ([total_q, hq] for varlen). The specs are qattn spec texts (qattn.formats builds them from
format names); they are constants of a compiled graph.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..decode import KvCache as _CacheView
from ..layout import LAYOUTS
from . import _decode, _device, _linear, _prefill, flashq as _flashq


def _lse_shape(q, layout):
    if layout == "bhsd":
        return (q.shape[0], q.shape[1], q.shape[2])
    return (q.shape[0], q.shape[2], q.shape[1])


@torch.library.custom_op("qattn::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, spec: str, layout: str, scale: float) -> Tensor:
    return _prefill.run(q, k, v, spec, layout, scale)


@attention.register_fake
def _(q, k, v, spec, layout, scale):
    torch._check(layout in LAYOUTS, lambda: f"layout '{layout}' is not supported; accepted: {LAYOUTS}")
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.custom_op("qattn::attention_lse", mutates_args=())
def attention_lse(q: Tensor, k: Tensor, v: Tensor, spec: str, layout: str, scale: float) -> Tuple[Tensor, Tensor]:
    return _prefill.run(q, k, v, spec, layout, scale, with_lse=True)


@attention_lse.register_fake
def _(q, k, v, spec, layout, scale):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(_lse_shape(q, layout), dtype=torch.float32)


@torch.library.custom_op("qattn::attention_varlen", mutates_args=())
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_kv: Tensor,
                     max_seqlen_q: int, max_seqlen_kv: int, spec: str, scale: float) -> Tensor:
    return _prefill.run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec, scale)


@attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec, scale):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _cache_view(k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size, k_mean=None):
    return _CacheView(k_cache, v_cache, capacity=capacity, page_size=page_size, block_table=block_table,
                      k_head_scale=k_head_scale, v_head_scale=v_head_scale, k_mean=k_mean)


# k_mean (K smoothing, float32 [heads_kv, d] or None) is written by an append with init_k_mean, so it is
# among the mutated arguments; decode and prefill over the cache return no LSE, and their outputs do not
# depend on it (softmax does not see the shift), so they do not take it.
@torch.library.custom_op("qattn::append_kv", mutates_args=("k_cache", "v_cache", "k_mean"))
def append_kv(k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, start: Tensor,
              block_table: Optional[Tensor], k_head_scale: Optional[Tensor], v_head_scale: Optional[Tensor],
              capacity: int, page_size: int, spec: str, k_mean: Optional[Tensor], init_k_mean: bool) -> None:
    rt = _device.runtime(_device.device_index(k))
    view = _cache_view(k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size, k_mean)
    rt.append_kv(spec, k, v, view, start, init_k_mean)


@append_kv.register_fake
def _(k_cache, v_cache, k, v, start, block_table, k_head_scale, v_head_scale, capacity, page_size, spec, k_mean,
      init_k_mean):
    return None


@torch.library.custom_op("qattn::append_kv_slots", mutates_args=("k_cache", "v_cache", "k_mean"))
def append_kv_slots(k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, slot_mapping: Tensor,
                    block_table: Optional[Tensor], k_head_scale: Optional[Tensor], v_head_scale: Optional[Tensor],
                    capacity: int, page_size: int, num_slots: int, spec: str, k_mean: Optional[Tensor],
                    init_k_mean: bool) -> None:
    rt = _device.runtime(_device.device_index(k))
    view = _cache_view(k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size, k_mean)
    rt.append_kv_slots(spec, k, v, view, slot_mapping, num_slots, init_k_mean)


@append_kv_slots.register_fake
def _(k_cache, v_cache, k, v, slot_mapping, block_table, k_head_scale, v_head_scale, capacity, page_size, num_slots,
      spec, k_mean, init_k_mean):
    return None


@torch.library.custom_op("qattn::prefill_cache", mutates_args=())
def prefill_cache(q: Tensor, cu_seqlens_q: Tensor, kv_lens: Tensor, k_cache: Tensor, v_cache: Tensor,
                  block_table: Optional[Tensor], k_head_scale: Optional[Tensor], v_head_scale: Optional[Tensor],
                  capacity: int, page_size: int, max_seqlen_q: int, max_kv_len: int, cache_spec: str, spec: str,
                  scale: float) -> Tensor:
    rt = _device.runtime(_device.device_index(q))
    view = _cache_view(k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size)
    return rt.attention_over_cache(q, cu_seqlens_q, max_seqlen_q, cache_spec, view, kv_lens, max_kv_len, spec,
                                   softmax_scale=scale or None)


@prefill_cache.register_fake
def _(q, cu_seqlens_q, kv_lens, k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size,
      max_seqlen_q, max_kv_len, cache_spec, spec, scale):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.custom_op("qattn::decode", mutates_args=())
def decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Tensor, block_table: Optional[Tensor],
           k_head_scale: Optional[Tensor], v_head_scale: Optional[Tensor], capacity: int, page_size: int,
           max_kv_len: int, spec: str, scale: float) -> Tensor:
    view = _cache_view(k_cache, v_cache, block_table, k_head_scale, v_head_scale, capacity, page_size)
    return _decode.run(q, view, kv_lens, max_kv_len, spec, scale,
                       (k_cache, v_cache, block_table, k_head_scale, v_head_scale))


@decode.register_fake
def _(q, k_cache, v_cache, kv_lens, block_table, k_head_scale, v_head_scale, capacity, page_size, max_kv_len,
      spec, scale):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.custom_op("qattn::linear", mutates_args=())
def linear(a: Tensor, w: Tensor, w_scale: Optional[Tensor], w_zero: Optional[Tensor], bias: Optional[Tensor],
           spec: str) -> Tensor:
    return _linear.run(a, w, w_scale, w_zero, bias, spec)


@linear.register_fake
def _(a, w, w_scale, w_zero, bias, spec):
    n, dtype = _linear.spec_fields(spec)
    return a.new_empty((a.shape[0], n), dtype=dtype)


@torch.library.custom_op("qattn::flashq_append", mutates_args=("cache",))
def flashq_append(cache: List[Tensor], block_table: Optional[Tensor], k: Tensor, v: Tensor, bits: List[int],
                  page_stride: int, max_blocks: int, spec: str) -> None:
    _flashq.append(cache, block_table, k, v, bits, page_stride, max_blocks, spec)


@flashq_append.register_fake
def _(cache, block_table, k, v, bits, page_stride, max_blocks, spec):
    return None


@torch.library.custom_op("qattn::flashq_decode", mutates_args=())
def flashq_decode(q: Tensor, cache: List[Tensor], block_table: Optional[Tensor], bits: List[int], page_stride: int,
                  max_blocks: int, max_kv_len: int, spec: str, scale: float) -> Tensor:
    return _flashq.decode(q, cache, block_table, bits, page_stride, max_blocks, max_kv_len, spec, scale)


@flashq_decode.register_fake
def _(q, cache, block_table, bits, page_stride, max_blocks, max_kv_len, spec, scale):
    return torch.empty_like(q, memory_format=torch.contiguous_format)
