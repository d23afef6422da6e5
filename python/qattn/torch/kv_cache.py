"""A quantized KV cache owned by torch tensors: the bytes (uint8), the block table of a paged cache and
the per-head scales of an FP8 cache, with append() and decode() through the qattn custom ops (so both
trace under torch.compile and replay in CUDA graphs)."""
import torch

from .. import formats
from ..decode import kv_cache_bytes, same_strides
from ..errors import BadInput


class KvCache:
    """K and V of `batch` sequences x `heads_kv` heads, up to `capacity` tokens each (contiguous: rounded
    up to a multiple of 4), in format `fmt`
    (qattn.formats.DECODE_FORMATS: bf16, int8, fp8, int4, int4_group), read by `heads_q` query heads.

    page_size 0: contiguous. page_size > 0 (a multiple of 4): paged, `num_pages` pages (default: enough
    for every sequence at capacity) and `block_table` int32 [batch, ceil(capacity / page_size)] of page
    ids, by default sequence b owning pages b * pages_per_seq ...; assign your own table to share pages.
    fp8: k_scale / v_scale float32 [heads_kv] (default 1.0: a value is its FP8 code times the scale).
    k_smoothing (quantized formats): the K cache stores every key minus k_mean, float32 [heads_kv, d], set by
    the first append from its tokens; outputs are those of the true keys, with K's channel bias out of the
    quantized rows (fp8: choose k_scale for the smoothed keys)."""

    def __init__(self, fmt, batch, heads_kv, head_dim, capacity, heads_q=None, dtype=torch.bfloat16, page_size=0,
                 num_pages=None, device=None, k_scale=None, v_scale=None, k_smoothing=False):
        device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if device.type != "cuda":
            raise BadInput(f"the KV cache lives on a CUDA device, not {device}")
        for name, value in (("batch", batch), ("heads_kv", heads_kv), ("head_dim", head_dim), ("capacity", capacity)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput(f"{name} must be an int >= 1, got {value!r}")
        if page_size and (isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 4 or page_size % 4):
            raise BadInput(f"page_size must be 0 (contiguous) or a positive multiple of 4, got {page_size!r}")
        if not page_size:
            capacity = -(-capacity // 4) * 4   # the kernels copy rows four at a time
        heads_q = heads_kv if heads_q is None else heads_q
        self.fmt = formats.decode_format(fmt)
        self.batch, self.heads_kv, self.heads_q, self.head_dim = batch, heads_kv, heads_q, head_dim
        self.capacity, self.page_size, self.dtype, self.device = capacity, int(page_size), dtype, device
        self.spec = formats.decode_spec(self.fmt, head_dim, str(dtype).replace("torch.", ""), heads_q, heads_kv,
                                        paged=self.page_size > 0)
        if self.page_size > 0:
            pages_per_seq = -(-capacity // self.page_size)
            num_pages = batch * pages_per_seq if num_pages is None else int(num_pages)
            self.num_pages = num_pages
            size = kv_cache_bytes(self.spec, num_pages, heads_kv, self.page_size)
            self.block_table = torch.arange(batch * pages_per_seq, dtype=torch.int32, device=device)
            self.block_table = self.block_table.remainder_(num_pages).view(batch, pages_per_seq)
        else:
            size = kv_cache_bytes(self.spec, batch, heads_kv, capacity)
            self.block_table = None
            self.num_pages = 0
        self.k = torch.empty(size, dtype=torch.uint8, device=device)
        self.v = torch.empty(size, dtype=torch.uint8, device=device)
        fp8 = self.fmt == "fp8"
        self.k_scale = self._scale("k_scale", k_scale) if fp8 else None
        self.v_scale = self._scale("v_scale", v_scale) if fp8 else None
        if k_smoothing and self.fmt in ("bf16", "fp16"):
            raise BadInput(f"k_smoothing applies to a quantized cache (int8, fp8, int4, int4_group), not {self.fmt}")
        self.k_mean = torch.zeros(heads_kv, head_dim, dtype=torch.float32, device=device) if k_smoothing else None
        self._k_mean_set = False

    def _init_k_mean(self):
        """Whether this append sets k_mean (the first one of a smoothed cache)."""
        first = self.k_mean is not None and not self._k_mean_set
        self._k_mean_set = self._k_mean_set or first
        return first

    def _scale(self, name, value):
        if value is None:
            return torch.ones(self.heads_kv, dtype=torch.float32, device=self.device)
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or tuple(value.shape) != (self.heads_kv,):
            raise BadInput(f"{name} must be a float32 tensor [{self.heads_kv}] (one scale per KV head)")
        return value.to(self.device).contiguous()

    def _int32(self, name, value):
        if isinstance(value, int) and not isinstance(value, bool):
            return torch.full((self.batch,), value, dtype=torch.int32, device=self.device)
        return value

    def append(self, k, v, start):
        """Writes new tokens k, v ([b, heads_kv, n, d], the cache's dtype) at token start[b] of each
        sequence (an int32 CUDA tensor [b], or an int for all), quantizing them once."""
        if not same_strides(k, v):   # the append call reads both with one set of strides
            k, v = (x.clone(memory_format=torch.contiguous_format) for x in (k, v))
        torch.ops.qattn.append_kv(self.k, self.v, k, v, self._int32("start", start), self.block_table, self.k_scale,
                                  self.v_scale, self.capacity, self.page_size, self.spec, self.k_mean,
                                  self._init_k_mean())

    @property
    def num_slots(self):
        """Cache rows per KV head: what a slot mapping may address (pages x page_size, or batch x capacity)."""
        if self.page_size > 0:
            return self.num_pages * self.page_size
        return self.batch * self.capacity

    def slot(self, sequence, position):
        """The slot of token `position` of `sequence` under the current block table (host ints; for
        building slot mappings in tests and examples, not on the hot path)."""
        if self.page_size > 0:
            page = int(self.block_table[sequence, position // self.page_size])
            return page * self.page_size + position % self.page_size
        return sequence * self.capacity + position

    def append_slots(self, k, v, slot_mapping):
        """Writes tokens k, v ([tokens, heads_kv, d], the cache's dtype) at the cache rows slot_mapping
        names (int64 CUDA tensor [tokens]; vLLM's layout: page * page_size + offset, or sequence *
        capacity + position here for a contiguous cache; -1 skips a token), quantizing them once."""
        if not same_strides(k, v):
            k, v = (x.clone(memory_format=torch.contiguous_format) for x in (k, v))
        torch.ops.qattn.append_kv_slots(self.k, self.v, k, v, slot_mapping, self.block_table, self.k_scale,
                                        self.v_scale, self.capacity, self.page_size, self.num_slots, self.spec,
                                        self.k_mean, self._init_k_mean())

    def prefill(self, q, cu_seqlens_q, max_seqlen_q, kv_lens, max_kv_len=None, is_causal=True, fmt="auto", scale=None):
        """Prefill over the cache (chunked prefill, shared prefixes): q packed [total_q, heads_q, d] with
        cu_seqlens_q (int32 CUDA [batch + 1]); sequence b attends to its first kv_lens[b] cached tokens
        (int32 CUDA [batch]), its own among the last (append them first). is_causal aligns at each
        sequence's end. fmt: the prefill format (qattn.formats), applied to the cache's rows read back
        as 16-bit values. Returns out like q."""
        if not isinstance(q, torch.Tensor) or q.dim() != 3:
            raise BadInput("q must be a packed 3-d CUDA tensor [total_q, heads_q, d]")
        cap = torch.cuda.get_device_capability(self.device)
        spec = formats.prefill_spec(fmt, cap, self.head_dim, str(self.dtype).replace("torch.", ""), bool(is_causal),
                                    self.heads_q, self.heads_kv) + " varlen"
        bound = self.capacity if max_kv_len is None else int(max_kv_len)
        return torch.ops.qattn.prefill_cache(q, cu_seqlens_q, kv_lens, self.k, self.v, self.block_table, self.k_scale,
                                             self.v_scale, self.capacity, self.page_size, int(max_seqlen_q), bound,
                                             self.spec, spec, formats.check_scale(scale))

    def decode(self, q, kv_lens, max_kv_len=None, scale=None, causal=True):
        """Attention of q ([b, heads_q, n, d], n new tokens per sequence, 1..64) over each sequence's
        first kv_lens[b] tokens (int32 CUDA tensor [b], or an int for all); returns out like q.
        max_kv_len bounds kv_lens (it sizes the splits; default: capacity, or kv_lens when an int).
        With n > 1 the last n cached tokens are q's own and causal masks them against each other (new
        token i sees cache tokens <= kv_len - n + i); causal=False lets each see all kv_lens tokens."""
        bound = self.capacity if max_kv_len is None else int(max_kv_len)
        if isinstance(kv_lens, int) and not isinstance(kv_lens, bool) and max_kv_len is None:
            bound = kv_lens
        return torch.ops.qattn.decode(q, self.k, self.v, self._int32("kv_lens", kv_lens), self.block_table,
                                      self.k_scale, self.v_scale, self.capacity, self.page_size, bound,
                                      self.spec + " causal" if causal and q.shape[2] > 1 else self.spec,
                                      formats.check_scale(scale))
