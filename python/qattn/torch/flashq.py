"""TurboAttention's FlashQ KV cache owned by torch tensors: INT4 / INT2 per-channel blocks of 64 tokens
with a bit width per KV head, and an INT8 buffer of the newest tokens that a new block is made from every
64 steps (include/qattn/flashq.hpp; the bytes as templates/qattn/decode/kv_layout.h lays them out).

prefill() fills the empty cache (it chooses the heads' bit widths and scales unless given, reading
statistics back: it waits for the stream); append() and decode() run on the device alone, so a decode
step of them can be captured in a CUDA graph after one eager step."""
import ctypes

import torch

from .. import _library, formats
from ..decode import _bhsd, _positive
from ..errors import BadInput, check
from . import _device

BLOCK_TOKENS = 64


def _c_view(tensors, block_table, bits, page_stride, max_blocks):
    """(the qattn_flashq_cache of the cache's tensors, the host arrays it points to). tensors: k_blocks,
    v_blocks, k_buffer, v_buffer, heads, compressed_lens, buffer_lens, k_scale8, v_scale8; bits: the K
    heads' widths, then the V heads'."""
    k_blocks, v_blocks, k_buffer, v_buffer, heads, clens, blens, ks, vs = tensors
    h = len(bits) // 2
    k_bits, v_bits = (ctypes.c_int * h)(*bits[:h]), (ctypes.c_int * h)(*bits[h:])
    c = _library.FlashQCache()
    c.k_blocks, c.v_blocks, c.k_buffer, c.v_buffer = (t.data_ptr() for t in (k_blocks, v_blocks, k_buffer, v_buffer))
    c.k_page_stride = c.v_page_stride = page_stride
    c.max_blocks = max_blocks
    c.heads, c.compressed_lens, c.buffer_lens = heads.data_ptr(), clens.data_ptr(), blens.data_ptr()
    c.k_scale8, c.v_scale8 = ks.data_ptr(), vs.data_ptr()
    c.k_bits, c.v_bits = k_bits, v_bits
    if block_table is not None:
        if block_table.dtype != torch.int32 or block_table.dim() != 2 or not block_table.is_contiguous() \
                or not block_table.is_cuda:
            raise BadInput("block_table must be a contiguous int32 CUDA tensor [batch, pages per sequence]")
        c.block_table, c.table_stride = block_table.data_ptr(), block_table.shape[1]
    return c, (k_bits, v_bits)


def _runtime_of(t):
    return _device.runtime(_device.device_index(t))


def append(tensors, block_table, k, v, bits, page_stride, max_blocks, spec):
    """The body of torch.ops.qattn.flashq_append: k, v [batch, heads_kv, n_new, d] into the cache."""
    ck, cv = _bhsd("k", k, torch), _bhsd("v", v, torch)
    if k.shape != v.shape or k.stride() != v.stride():
        raise BadInput(f"k and v must have one shape and strides, got {tuple(k.shape)} {k.stride()} and "
                       f"{tuple(v.shape)} {v.stride()}")
    rt = _runtime_of(k)
    args = _library.FlashQAppendArgs()
    check(rt._lib, rt._lib.qattn_flashq_append_args_init(ctypes.byref(args), ctypes.sizeof(args)),
          "qattn_flashq_append_args_init")
    spec_b = spec.encode()
    args.spec, args.batch, args.heads_kv, args.n_new = spec_b, k.shape[0], k.shape[1], k.shape[2]
    args.k, args.v, args.sb, args.sh, args.ss = ck.data, cv.data, ck.sb, ck.sh, ck.ss
    view, keep = _c_view(tensors, block_table, bits, page_stride, max_blocks)
    args.cache = ctypes.pointer(view)
    stream = torch.cuda.current_stream(k.device).cuda_stream
    with rt._call() as handle:
        check(rt._lib, rt._lib.qattn_flashq_append(handle, ctypes.byref(args), stream), "qattn_flashq_append")
    del keep


def decode(q, tensors, block_table, bits, page_stride, max_blocks, max_kv_len, spec, scale):
    """The body of torch.ops.qattn.flashq_decode: out [batch, heads_q, n, d] like q."""
    rt = _runtime_of(q)
    lib = rt._lib
    args = _library.DecodeArgs()
    check(lib, lib.qattn_decode_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_decode_args_init")
    spec_b = spec.encode()
    args.spec = spec_b
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    args.q, args.o = _bhsd("q", q, torch), _bhsd("out", out, torch)
    heads_kv = len(bits) // 2
    args.shape = _library.Shape(q.shape[0], q.shape[1], heads_kv, q.shape[2], _positive("max_kv_len", max_kv_len))
    view, keep = _c_view(tensors, block_table, bits, page_stride, max_blocks)
    args.flashq = ctypes.cast(ctypes.pointer(view), ctypes.c_void_p)
    args.softmax_scale = scale
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with rt._call() as handle:
        check(lib, lib.qattn_decode(handle, ctypes.byref(args), stream), "qattn_decode")
    del keep
    return out


class FlashQCache:
    """K and V of `batch` sequences x `heads_kv` heads, up to `capacity` tokens each, read by `heads_q`
    query heads (dtype: the tokens' and outputs' type).

    paged False: each sequence owns ceil(capacity / 64) consecutive pages of blocks. paged True:
    `block_table` int32 [batch, ceil(capacity / 64)] of page ids over `num_pages` pages (default: every
    sequence at capacity, sequence b owning pages b * pages_per_seq ...); assign your own to share pages.
    Pages are sized for 4 bits in every head (an upper bound for any choice of bit widths)."""

    def __init__(self, batch, heads_kv, head_dim, capacity, heads_q=None, dtype=torch.float16, paged=False,
                 num_pages=None, device=None):
        device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if device.type != "cuda":
            raise BadInput(f"the FlashQ cache lives on a CUDA device, not {device}")
        for name, value in (("batch", batch), ("heads_kv", heads_kv), ("head_dim", head_dim), ("capacity", capacity)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput(f"{name} must be an int >= 1, got {value!r}")
        heads_q = heads_kv if heads_q is None else heads_q
        self.batch, self.heads_kv, self.heads_q, self.head_dim = batch, heads_kv, heads_q, head_dim
        self.capacity, self.dtype, self.device, self.paged = capacity, dtype, device, bool(paged)
        self.spec = formats.cache_spec(formats.FLASHQ_FORMAT, head_dim, str(dtype).replace("torch.", ""), heads_q,
                                       heads_kv, self.paged)
        lib = _library.load()
        page, buffer = ctypes.c_int64(), ctypes.c_int64()
        check(lib, lib.qattn_flashq_page_bytes(head_dim, heads_kv, None, ctypes.byref(page)), "qattn_flashq_page_bytes")
        check(lib, lib.qattn_flashq_buffer_bytes(head_dim, batch, heads_kv, ctypes.byref(buffer)),
              "qattn_flashq_buffer_bytes")
        self.pages_per_seq = -(-capacity // BLOCK_TOKENS)
        self.num_pages = batch * self.pages_per_seq if num_pages is None else int(num_pages)
        if self.num_pages < 1:
            raise BadInput(f"num_pages must be >= 1, got {num_pages!r}")

        def zeros(n, dtype):
            return torch.zeros(n, dtype=dtype, device=device)

        self.k_blocks = zeros(page.value * self.num_pages, torch.uint8)
        self.v_blocks = zeros(page.value * self.num_pages, torch.uint8)
        self.k_buffer, self.v_buffer = zeros(buffer.value, torch.uint8), zeros(buffer.value, torch.uint8)
        self.heads = zeros(4 * heads_kv, torch.int32)
        self.compressed_lens, self.buffer_lens = zeros(batch, torch.int32), zeros(batch, torch.int32)
        self.k_scale8, self.v_scale8 = zeros(heads_kv, torch.float32), zeros(heads_kv, torch.float32)
        self.block_table = None
        if self.paged:
            table = torch.arange(batch * self.pages_per_seq, dtype=torch.int32, device=device)
            self.block_table = table.remainder_(self.num_pages).view(batch, self.pages_per_seq)
        self.page_bytes = page.value
        self._bits = None   # after prefill(): the K heads' widths, then the V heads'

    @property
    def bits(self):
        """The heads' bit widths (K, V) as lists; zeros before prefill()."""
        bits = self._bits_list()
        return bits[:self.heads_kv], bits[self.heads_kv:]

    def _tokens(self, name, t, n_max=None):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype != self.dtype or not t.is_cuda:
            raise BadInput(f"{name} must be a CUDA {self.dtype} tensor [batch, heads_kv, n, head_dim]")
        want = (self.batch, self.heads_kv, self.head_dim)
        if (t.shape[0], t.shape[1], t.shape[3]) != want:
            raise BadInput(f"{name} has shape {tuple(t.shape)}; expected [{want[0]}, {want[1]}, n, {want[2]}]")
        if n_max is not None and not 1 <= t.shape[2] <= n_max:
            raise BadInput(f"{name} holds {t.shape[2]} tokens; accepted: 1 to {n_max} per call")

    def _runtime(self):
        return _device.runtime(self.device.index if self.device.index is not None else torch.cuda.current_device())

    def prefill(self, k, v, lens=None, n_low=0, k_scale8=None, v_scale8=None):
        """Fills the empty cache with k, v ([batch, heads_kv, n, head_dim]): sequence b's first lens[b]
        tokens (a list of ints; None: n for all). n_low heads get 2 bits (the lowest-priority ones; -1:
        half), the others 4. k_scale8 / v_scale8: universal INT8 scales (lists of heads_kv floats; None:
        absmax / 127). Waits for the stream while it chooses."""
        if self._bits is not None:
            raise BadInput("this FlashQ cache was prefilled already; prefill() fills an empty cache (make a new one)")
        self._tokens("k", k), self._tokens("v", v)
        ck, cv = _bhsd("k", k, torch), _bhsd("v", v, torch)
        if k.stride() != v.stride():
            raise BadInput(f"k and v must have the same strides, got {k.stride()} and {v.stride()}")
        n = k.shape[2]
        if n > self.capacity:
            raise BadInput(f"{n} prefill tokens exceed the cache's capacity of {self.capacity}")
        rt = self._runtime()
        args = _library.FlashQPrefillArgs()
        check(rt._lib, rt._lib.qattn_flashq_prefill_args_init(ctypes.byref(args), ctypes.sizeof(args)),
              "qattn_flashq_prefill_args_init")
        spec_b = self.spec.encode()
        args.spec, args.batch, args.heads_kv, args.n, args.n_low = spec_b, self.batch, self.heads_kv, n, int(n_low)
        args.k, args.v, args.sb, args.sh, args.ss = ck.data, cv.data, ck.sb, ck.sh, ck.ss
        keep = []
        if lens is not None:
            if len(lens) != self.batch:
                raise BadInput(f"lens must hold {self.batch} ints (tokens per sequence), got {len(lens)}")
            keep.append((ctypes.c_int * self.batch)(*[int(x) for x in lens]))
            args.lens = keep[-1]
        for field, value in (("k_scale8", k_scale8), ("v_scale8", v_scale8)):
            if value is not None:
                if len(value) != self.heads_kv:
                    raise BadInput(f"{field} must hold {self.heads_kv} floats (one per KV head)")
                keep.append((ctypes.c_float * self.heads_kv)(*[float(x) for x in value]))
                setattr(args, field, keep[-1])
        # Bits all 0: the prefill chooses them and writes them into the view's host arrays.
        view, (k_bits, v_bits) = _c_view(self.tensors, self._table(), self._bits_list(), self.page_bytes,
                                         self.pages_per_seq)
        args.cache = ctypes.pointer(view)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        with rt._call() as handle:
            check(rt._lib, rt._lib.qattn_flashq_prefill(handle, ctypes.byref(args), stream), "qattn_flashq_prefill")
        self._bits = tuple(k_bits) + tuple(v_bits)   # plain ints: what the ops take (and trace)

    def append(self, k, v):
        """One decode step's new tokens k, v ([batch, heads_kv, n_new, head_dim], 1 to 16), quantized into
        the INT8 buffer (and a full buffer compressed into a block first), on the device
        (torch.ops.qattn.flashq_append)."""
        self._tokens("k", k, 16), self._tokens("v", v, 16)
        self._require_prefilled("append")
        torch.ops.qattn.flashq_append(self.tensors, self._table(), k, v, self._bits_list(), self.page_bytes,
                                      self.pages_per_seq, self.spec)

    def decode(self, q, max_kv_len=None, scale=None, causal=True):
        """Attention of q ([batch, heads_q, n, head_dim], n new tokens, their K/V appended first) over each
        sequence's cached tokens (blocks, then buffer; the lengths live on the device). max_kv_len bounds
        the lengths (it sizes the splits; default: the capacity). With n > 1 and causal, new token i sees
        the cache up to its own position. Returns out like q."""
        self._require_prefilled("decode")
        if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.dtype != self.dtype or not q.is_cuda \
                or (q.shape[0], q.shape[1], q.shape[3]) != (self.batch, self.heads_q, self.head_dim):
            raise BadInput(f"q must be a CUDA {self.dtype} tensor [{self.batch}, {self.heads_q}, n, {self.head_dim}]")
        bound = self.capacity if max_kv_len is None else _positive("max_kv_len", max_kv_len)
        spec = self.spec + " causal" if causal and q.shape[2] > 1 else self.spec
        return torch.ops.qattn.flashq_decode(q, self.tensors, self._table(), self._bits_list(), self.page_bytes,
                                             self.pages_per_seq, bound, spec, formats.check_scale(scale))

    @property
    def tensors(self):
        """The cache's tensors in the order the ops take them: k_blocks, v_blocks, k_buffer, v_buffer,
        heads, compressed_lens, buffer_lens, k_scale8, v_scale8."""
        return [self.k_blocks, self.v_blocks, self.k_buffer, self.v_buffer, self.heads, self.compressed_lens,
                self.buffer_lens, self.k_scale8, self.v_scale8]

    def _table(self):
        return self.block_table if self.paged else None

    def _bits_list(self):
        return list(self._bits) if self._bits is not None else [0] * (2 * self.heads_kv)

    def _require_prefilled(self, what):
        if self._bits is None:
            raise BadInput(f"{what}() needs a prefilled FlashQ cache (its bit widths and scales); call prefill() first")
