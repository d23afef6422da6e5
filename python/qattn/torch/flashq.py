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


def _flashq_spec(head_dim, dtype, heads_q, heads_kv, paged):
    t = formats.SPEC_TYPE.get(str(dtype).replace("torch.", ""))
    if t is None:
        raise BadInput(f"dtype {dtype} is not a FlashQ cache's; accepted: torch.float16, torch.bfloat16")
    tokens = ["decode qk=flashq:per_channel pv=flashq:per_channel", f"out={t}", f"d={head_dim}"]
    gqa = formats.gqa_of(heads_q, heads_kv)
    if gqa > 1:
        tokens.append(f"gqa={gqa}")
    if paged:
        tokens.append("paged")
    return " ".join(tokens)


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
        self.spec = _flashq_spec(head_dim, dtype, heads_q, heads_kv, self.paged)
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
        self._k_bits = (ctypes.c_int * heads_kv)()   # 0: chosen by prefill()
        self._v_bits = (ctypes.c_int * heads_kv)()
        self._c = _library.FlashQCache()
        self._c.k_page_stride = self._c.v_page_stride = page.value
        self._c.max_blocks = self.pages_per_seq
        self._c.k_bits, self._c.v_bits = self._k_bits, self._v_bits
        self._prefilled = False

    @property
    def bits(self):
        """The heads' bit widths (K, V) as lists; zeros before prefill()."""
        return list(self._k_bits), list(self._v_bits)

    def _view(self):
        """The C description with the tensors' current addresses (block_table may have been replaced)."""
        c = self._c
        c.k_blocks, c.v_blocks = self.k_blocks.data_ptr(), self.v_blocks.data_ptr()
        c.k_buffer, c.v_buffer = self.k_buffer.data_ptr(), self.v_buffer.data_ptr()
        c.heads = self.heads.data_ptr()
        c.compressed_lens, c.buffer_lens = self.compressed_lens.data_ptr(), self.buffer_lens.data_ptr()
        c.k_scale8, c.v_scale8 = self.k_scale8.data_ptr(), self.v_scale8.data_ptr()
        if self.paged:
            table = self.block_table
            if not isinstance(table, torch.Tensor) or table.dtype != torch.int32 or table.dim() != 2 \
                    or table.shape[0] != self.batch or not table.is_contiguous() or not table.is_cuda:
                raise BadInput(f"block_table must be a contiguous int32 CUDA tensor [{self.batch}, pages per sequence]")
            c.block_table, c.table_stride = table.data_ptr(), table.shape[1]
        return c

    def _tokens(self, name, t, n_max=None):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype != self.dtype or not t.is_cuda:
            raise BadInput(f"{name} must be a CUDA {self.dtype} tensor [batch, heads_kv, n, head_dim]")
        want = (self.batch, self.heads_kv, self.head_dim)
        if (t.shape[0], t.shape[1], t.shape[3]) != want:
            raise BadInput(f"{name} has shape {tuple(t.shape)}; expected [{want[0]}, {want[1]}, n, {want[2]}]")
        if n_max is not None and not 1 <= t.shape[2] <= n_max:
            raise BadInput(f"{name} holds {t.shape[2]} tokens; accepted: 1 to {n_max} per call")
        return _bhsd(name, t, torch)

    def _runtime(self):
        return _device.runtime(self.device.index if self.device.index is not None else torch.cuda.current_device())

    def prefill(self, k, v, lens=None, n_low=0, k_scale8=None, v_scale8=None):
        """Fills the empty cache with k, v ([batch, heads_kv, n, head_dim]): sequence b's first lens[b]
        tokens (a list of ints; None: n for all). n_low heads get 2 bits (the lowest-priority ones; -1:
        half), the others 4. k_scale8 / v_scale8: universal INT8 scales (lists of heads_kv floats; None:
        absmax / 127). Waits for the stream while it chooses."""
        if self._prefilled:
            raise BadInput("this FlashQ cache was prefilled already; prefill() fills an empty cache (make a new one)")
        ck, cv = self._tokens("k", k), self._tokens("v", v)
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
        args.cache = ctypes.pointer(self._view())
        stream = torch.cuda.current_stream(self.device).cuda_stream
        with rt._call() as handle:
            check(rt._lib, rt._lib.qattn_flashq_prefill(handle, ctypes.byref(args), stream), "qattn_flashq_prefill")
        self._prefilled = True

    def append(self, k, v):
        """One decode step's new tokens k, v ([batch, heads_kv, n_new, head_dim], 1 to 16), quantized into
        the INT8 buffer (and a full buffer compressed into a block first), on the device."""
        ck, cv = self._tokens("k", k, 16), self._tokens("v", v, 16)
        if k.stride() != v.stride():
            raise BadInput(f"k and v must have the same strides, got {k.stride()} and {v.stride()}")
        self._require_prefilled("append")
        rt = self._runtime()
        args = _library.FlashQAppendArgs()
        check(rt._lib, rt._lib.qattn_flashq_append_args_init(ctypes.byref(args), ctypes.sizeof(args)),
              "qattn_flashq_append_args_init")
        spec_b = self.spec.encode()
        args.spec, args.batch, args.heads_kv, args.n_new = spec_b, self.batch, self.heads_kv, k.shape[2]
        args.k, args.v, args.sb, args.sh, args.ss = ck.data, cv.data, ck.sb, ck.sh, ck.ss
        args.cache = ctypes.pointer(self._view())
        stream = torch.cuda.current_stream(self.device).cuda_stream
        with rt._call() as handle:
            check(rt._lib, rt._lib.qattn_flashq_append(handle, ctypes.byref(args), stream), "qattn_flashq_append")

    def decode(self, q, max_kv_len=None, scale=None, causal=True):
        """Attention of q ([batch, heads_q, n, head_dim], n new tokens, their K/V appended first) over each
        sequence's cached tokens (blocks, then buffer; the lengths live on the device). max_kv_len bounds
        the lengths (it sizes the splits; default: the capacity). With n > 1 and causal, new token i sees
        the cache up to its own position. Returns out like q."""
        self._require_prefilled("decode")
        if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.dtype != self.dtype or not q.is_cuda \
                or (q.shape[0], q.shape[1], q.shape[3]) != (self.batch, self.heads_q, self.head_dim):
            raise BadInput(f"q must be a CUDA {self.dtype} tensor [{self.batch}, {self.heads_q}, n, {self.head_dim}]")
        rt = self._runtime()
        lib = rt._lib
        args = _library.DecodeArgs()
        check(lib, lib.qattn_decode_args_init(ctypes.byref(args), ctypes.sizeof(args)), "qattn_decode_args_init")
        spec_b = (self.spec + " causal" if causal and q.shape[2] > 1 else self.spec).encode()
        args.spec = spec_b
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        args.q, args.o = _bhsd("q", q, torch), _bhsd("out", out, torch)
        bound = self.capacity if max_kv_len is None else _positive("max_kv_len", max_kv_len)
        args.shape = _library.Shape(self.batch, self.heads_q, self.heads_kv, q.shape[2], bound)
        view = self._view()
        args.flashq = ctypes.cast(ctypes.pointer(view), ctypes.c_void_p)
        args.softmax_scale = formats.check_scale(scale)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        with rt._call() as handle:
            check(lib, lib.qattn_decode(handle, ctypes.byref(args), stream), "qattn_decode")
        return out

    def _require_prefilled(self, what):
        if not self._prefilled:
            raise BadInput(f"{what}() needs a prefilled FlashQ cache (its bit widths and scales); call prefill() first")
