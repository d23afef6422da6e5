"""Runtime and Prepared: the Python face of qattn_runtime and qattn_prepared.

torch is imported only by the calls that take tensors, so compile() and tune() work without it.
"""
import contextlib
import ctypes
import threading
import weakref

from . import _library
from . import decode as _decode
from . import linear as _linear
from . import tuning as _tuning
from . import varlen as _varlen
from . import layout as checks   # not `layout`: that is the name of the methods' layout argument
from .errors import BadInput, QattnError, check

_NAME_CAPACITY = 1024   # kernel names are ~100 characters


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("qattn: attention() and prepare() need PyTorch (compile() and tune() do not)") from None
    return torch


def _encode(text, what):
    if not isinstance(text, str):
        raise BadInput(f"{what} must be a str, not {type(text).__name__}")
    return text.encode("utf-8")


def _call_with_name(fn):
    """Calls fn(buffer, size) (one C call that writes a kernel name) and returns the name."""
    buf = ctypes.create_string_buffer(_NAME_CAPACITY)
    fn(buf, _NAME_CAPACITY)
    name = buf.value.decode("utf-8")
    if len(name) >= _NAME_CAPACITY - 1:
        raise QattnError(f"kernel name longer than {_NAME_CAPACITY - 1} bytes was truncated: {name[:60]}...")
    return name


class _Described:
    """A torch tensor as the C API sees it, plus its (batch, seq, heads, d) for checks."""

    def __init__(self, name, tensor, layout_name):
        torch = _torch()
        if not isinstance(tensor, torch.Tensor):
            raise BadInput(f"{name} must be a torch.Tensor, not {type(tensor).__name__}")
        if not tensor.is_cuda:
            raise BadInput(f"{name} is on {tensor.device}; qattn needs CUDA tensors")
        self.tensor = tensor
        self.dims, strides = checks.decompose(name, tuple(tensor.shape), tensor.stride(), layout_name)
        self.c = _library.Tensor(tensor.data_ptr(), *strides)
        self.dtype_name = str(tensor.dtype).replace("torch.", "")


def _check_same_device(runtime, named):
    for name, t in named:
        if t.device.index != runtime.device:
            raise BadInput(f"{name} is on {t.device} but the runtime drives cuda:{runtime.device}")


def _output(name, tensor, like, layout_name, spec):
    """The output tensor (allocated in q's layout when None), checked against q."""
    if tensor is None:
        tensor = _torch().empty_like(like.tensor, memory_format=_torch().contiguous_format)
    out = _Described(name, tensor, layout_name)
    checks.check_output(name, like.dims, out.dims)
    checks.check_dtype(spec, out.dtype_name)
    return out


def _lse_pointer(lse, dims, heads_q, device_index):
    """lse must be a contiguous float32 [b, hq, q_len] CUDA tensor (the C API writes it densely)."""
    if lse is None:
        return None
    torch = _torch()
    batch, q_len = dims[0], dims[1]
    if not isinstance(lse, torch.Tensor) or not lse.is_cuda or lse.dtype != torch.float32:
        raise BadInput("lse must be a float32 CUDA tensor of shape [b, hq, q_len]")
    if tuple(lse.shape) != (batch, heads_q, q_len) or not lse.is_contiguous():
        raise BadInput(f"lse has shape {list(lse.shape)} (contiguous: {lse.is_contiguous()}); expected a "
                       f"contiguous [b, hq, q_len] = {[batch, heads_q, q_len]}")
    if lse.device.index != device_index:
        raise BadInput(f"lse is on {lse.device} but the runtime drives cuda:{device_index}")
    return lse.data_ptr()


def _scale(softmax_scale):
    # The C API reads 0 as "1/sqrt(d)".
    return 0.0 if softmax_scale is None else float(softmax_scale)


class Runtime:
    """A qattn runtime: kernel cache (SQLite), tuner and launcher for one CUDA device.

    Creating one needs no GPU (compile-only use); attention/prepare/tune need the device."""

    def __init__(self, cache_path=None, use_cache=True, read_only=False, tune=True, device=0,
                 shipped_cache_path=None):
        self._handle = None   # first, so that close() from __del__ works whatever fails below
        # Calls in flight on the C handle: close() waits for them to return before it frees the handle
        # (freeing it under a running compile() is a use-after-free in C). New calls are refused once
        # close() has begun.
        self._calls = threading.Condition()
        self._in_flight = 0
        self._closing = False
        self._lib = _library.load()
        self.device = int(device)
        self._prepared = weakref.WeakSet()
        options = _library.Options()
        check(self._lib, self._lib.qattn_options_init(ctypes.byref(options), ctypes.sizeof(options)),
              "qattn_options_init")
        # Kept referenced so the bytes outlive the create call whatever the C side does with the pointer.
        self._cache_path_bytes = None if cache_path is None else _encode(str(cache_path), "cache_path")
        self._shipped_bytes = None if shipped_cache_path is None else _encode(str(shipped_cache_path),
                                                                                "shipped_cache_path")
        options.cache_path = self._cache_path_bytes
        options.shipped_cache_path = self._shipped_bytes
        options.use_cache = int(bool(use_cache))
        options.read_only = int(bool(read_only))
        options.tune = int(bool(tune))
        options.device = self.device
        handle = ctypes.c_void_p()
        check(self._lib, self._lib.qattn_runtime_open(ctypes.byref(options), ctypes.byref(handle)),
              "qattn_runtime_open")
        self._handle = handle.value

    # -- lifetime ---------------------------------------------------------------------------------
    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Frees the runtime, after every Prepared made from it (their workspaces belong to it).

        Thread-safe: waits for calls other threads have in flight on this runtime to return; calls that
        start after close() began raise BadInput. Calling close() from inside a call (e.g. a callback)
        would wait forever and is not supported."""
        with self._calls:
            if self._handle is None or self._closing:
                # Closed, or another thread is closing: wait until it is done, so that close() returning
                # always means the handle is freed.
                self._calls.wait_for(lambda: self._handle is None)
                return
            self._closing = True
            self._calls.wait_for(lambda: self._in_flight == 0)
        try:
            for prepared in list(self._prepared):
                prepared.close()
            self._lib.qattn_runtime_destroy(self._handle)
        finally:
            with self._calls:
                self._handle = None
                self._calls.notify_all()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass   # interpreter shutdown: the library may already be gone

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextlib.contextmanager
    def _call(self):
        """The live handle for one C call; close() waits until the block is left."""
        with self._calls:
            if self._handle is None or self._closing:
                raise BadInput("this qattn Runtime is closed" if self._handle is None else
                               "this qattn Runtime is being closed")
            self._in_flight += 1
        try:
            yield self._handle
        finally:
            with self._calls:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._calls.notify_all()

    @property
    def cache_status(self):
        """The latest cache trouble in one line ('' while the cache works as opened): a cache file not
        opened as asked, or one that failed (locked by another process past its ~10 s budget, damaged,
        not writable), so that compiled kernels and tuning results are not stored."""
        buf = ctypes.create_string_buffer(4096)
        with self._call() as handle:
            check(self._lib, self._lib.qattn_cache_status(handle, buf, len(buf)), "qattn_cache_status")
        return buf.value.decode("utf-8", "replace")

    # -- compile-only and tuning ------------------------------------------------------------------
    def compile(self, spec, tiling=None):
        """Compiles `spec` (which must name arch=) with `tiling` ('bm128_bn64_w4_s2'; None: the default),
        storing the binary in the cache; returns the kernel name. Needs no GPU."""
        spec_b = _encode(spec, "spec")
        tiling_b = None if tiling is None else _encode(tiling, "tiling")
        with self._call() as handle:
            def call(buf, size):
                check(self._lib, self._lib.qattn_compile(handle, spec_b, tiling_b, buf, size), "qattn_compile")

            return _call_with_name(call)

    def tune(self, spec, batch, heads_q, heads_kv, q_len, kv_len):
        """Tunes `spec` for the bucket of this shape on the device; returns (kernel name, median time us)."""
        spec_b = _encode(spec, "spec")
        shape = _library.Shape(int(batch), int(heads_q), int(heads_kv), int(q_len), int(kv_len))
        time_us = ctypes.c_double(0.0)
        with self._call() as handle:
            def call(buf, size):
                check(self._lib, self._lib.qattn_tune(handle, spec_b, shape, buf, size, ctypes.byref(time_us)),
                      "qattn_tune")

            name = _call_with_name(call)
        return name, time_us.value

    # -- decode over a KV cache (python/qattn/decode.py) -------------------------------------------
    def append_kv(self, spec, k, v, cache, start, init_k_mean=False):
        """Quantizes new tokens k, v ([b, h_kv, n_new, d] CUDA tensors of type out=) into `cache` (a
        qattn.KvCache) from token start[b] (int32 CUDA tensor [b]) on torch's current stream.
        init_k_mean: first set the cache's k_mean to the mean of these K tokens (K smoothing)."""
        return _decode.append_kv(self, spec, k, v, cache, start, init_k_mean)

    def append_kv_slots(self, spec, k, v, cache, slot_mapping, num_slots, init_k_mean=False):
        """Quantizes tokens k, v ([tokens, h_kv, d]) into `cache` at the rows slot_mapping names (int64
        CUDA tensor [tokens]: page * page_size + offset, or sequence * capacity + position; -1 and rows
        outside [0, num_slots) are skipped), as vLLM's cache write; num_slots: the cache's rows per head."""
        return _decode.append_kv_slots(self, spec, k, v, cache, slot_mapping, num_slots, init_k_mean)

    def decode(self, spec, q, cache, kv_lens, out=None, lse=None, softmax_scale=None, splits=0,
               unified_max=None, tiling=None, max_kv_len=None):
        """Decode attention of q ([b, h_q, q_len, d]) over `cache` (qattn.KvCache) with kv_lens (int32
        CUDA tensor [b]); returns out. unified_max: None or (phi, lo, hi) for softmax=unified_max.
        max_kv_len: a bound on every kv_lens entry (sizes the splits); None reads kv_lens.max() from the
        device, a synchronizing copy that a CUDA-graph capture cannot hold."""
        return _decode.decode(self, spec, q, cache, kv_lens, out, lse, softmax_scale, splits, unified_max,
                              tiling, max_kv_len)

    # -- linear layers (python/qattn/linear.py) ----------------------------------------------------
    def linear(self, spec, a, w, c, **kw):
        """C = A . W^T (+ bias) for a linear spec into c ([m, n] CUDA tensor, rows contiguous); a: [m, k];
        w: the weights in w='s format; keywords w_scale, w_zero (int8 / int4), bias, splits, tiling, m,
        lda, ldw, ldc. Returns c."""
        return _linear.linear(self, spec, a, w, c, **kw)

    def tune_linear(self, spec, rows=None):
        """Times the layer's GEMV, flat GEMM and GEMM over m (rows: token counts 1..8192; None: the default
        list) on this GPU, stores M1 / M2 in the cache and uses them at once; returns the table (a dict)."""
        return _linear.tune(self, spec, rows)

    def linear_route(self, spec, a, w, c, **kw):
        """(kernel name, dataflow, split count) that linear() runs for the same arguments."""
        return _linear.linear_route(self, spec, a, w, c, **kw)

    def tune_decode(self, spec, **sweep):
        """Decode's dataflow and split sweeps on the device (minutes with the defaults; keyword arguments
        narrow them: kv_lens, rows, batch_heads, splits, heads_kv, batch, min_split_tokens, q_len,
        tolerance); stores and returns both decisions."""
        return _tuning.tune_decode(self, spec, **sweep)

    def decode_tuned(self, spec):
        """True when both decode decisions of the spec's family are stored for this device."""
        return _tuning.decode_tuned(self, spec)

    # -- tensors ----------------------------------------------------------------------------------
    def _describe_inputs(self, q, k, v, spec, layout_name):
        spec_b = _encode(spec, "spec")
        dq, dk, dv = (_Described(n, t, layout_name) for n, t in (("q", q), ("k", k), ("v", v)))
        for name, d in (("q", dq), ("k", dk), ("v", dv)):
            if d.dtype_name not in checks.DTYPE_OF_OUT.values():
                raise BadInput(f"{name} is {d.dtype_name}; accepted: float16, bfloat16")
            checks.check_dtype(spec, d.dtype_name)
        if not dq.dtype_name == dk.dtype_name == dv.dtype_name:
            raise BadInput(f"q, k, v have dtypes {dq.dtype_name}, {dk.dtype_name}, {dv.dtype_name}; "
                           f"they must be one")
        _check_same_device(self, (("q", q), ("k", k), ("v", v)))
        shape = _library.Shape(**checks.check_problem(spec, dq.dims, dk.dims, dv.dims))
        return spec_b, dq, dk, dv, shape

    def _stream(self):
        return _torch().cuda.current_stream(self.device).cuda_stream

    def attention(self, q, k, v, spec, out=None, softmax_scale=None, lse=None, layout="bshd"):
        """out = attention(q, k, v) on torch's current stream; quantizes inside for quantized specs.

        q: [b, s_q, h_q, d] ('bshd') or [b, h_q, s_q, d] ('bhsd'); k, v likewise with h_kv heads; any
        strides with a contiguous last dimension. out: allocated in q's shape when None. lse: None or a
        contiguous float32 [b, h_q, s_q] tensor (natural log). softmax_scale None: 1/sqrt(d)."""
        spec_b, dq, dk, dv, shape = self._describe_inputs(q, k, v, spec, layout)
        o = _output("out", out, dq, layout, spec)
        _check_same_device(self, (("out", o.tensor),))
        lse_ptr = _lse_pointer(lse, dq.dims, shape.heads_q, self.device)
        with self._call() as handle:
            check(self._lib, self._lib.qattn_attention(handle, spec_b, shape, dq.c, dk.c, dv.c, o.c,
                                                       _scale(softmax_scale), lse_ptr, self._stream()),
                  "qattn_attention")
        return o.tensor

    def attention_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec, out=None,
                         softmax_scale=None, lse=None):
        """out = attention over a batch of sequences of their own lengths, on torch's current stream.

        q: [total_q, h_q, d] and k, v: [total_kv, h_kv, d], the sequences packed along dim 0 (any strides
        with a contiguous last dimension): sequence b's queries are rows cu_seqlens_q[b]:cu_seqlens_q[b+1]
        of q and out, its keys rows cu_seqlens_kv[b]:cu_seqlens_kv[b+1] of k and v. cu_seqlens_*: int32
        CUDA tensors [batch + 1], read on the device only. max_seqlen_*: the longest lengths (a longer
        sequence is cut to them). Causal masks align at each sequence's end. The spec gets `varlen` if it
        lacks it. out: allocated like q when None. lse: None or a contiguous float32 [total_q, h_q]."""
        return _varlen.attention_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, spec,
                                        out, softmax_scale, lse)

    def attention_over_cache(self, q, cu_seqlens_q, max_seqlen_q, cache_spec, cache, kv_lens, max_kv_len, spec,
                             out=None, softmax_scale=None, lse=None):
        """Prefill over a KV cache (chunked prefill, shared prefixes), on torch's current stream.

        q: packed [total_q, h_q, d] with cu_seqlens_q (int32 CUDA [batch + 1]); sequence b attends to the
        first kv_lens[b] (int32 CUDA [batch]) rows of `cache` (a qattn.KvCache described by the decode spec
        cache_spec), its own tokens among the last (append them first). max_seqlen_q / max_kv_len bound the
        lengths. Causal (in spec) aligns at each sequence's end. lse: None or float32 [total_q, h_q]."""
        return _varlen.attention_over_cache(self, q, cu_seqlens_q, max_seqlen_q, cache_spec, cache, kv_lens,
                                            max_kv_len, spec, out, softmax_scale, lse)

    def prepare(self, q, k, v, spec, layout="bshd"):
        """Quantizes q, k, v once (on the current stream) into a Prepared whose run() launches the
        attention kernel alone."""
        spec_b, dq, dk, dv, shape = self._describe_inputs(q, k, v, spec, layout)
        handle = ctypes.c_void_p()
        with self._call() as rt_handle:
            check(self._lib, self._lib.qattn_prepare(rt_handle, spec_b, shape, dq.c, dk.c, dv.c, self._stream(),
                                                     ctypes.byref(handle)),
                  "qattn_prepare")
            # Registered before close() may run, so that close() frees it first.
            prepared = Prepared(self, handle.value, spec, layout, dq, (q, k, v))
            self._prepared.add(prepared)
        return prepared


class Prepared:
    """Quantized (or referenced) q, k, v ready for repeated attention-kernel launches."""

    def __init__(self, runtime, handle, spec, layout_name, q_described, inputs):
        self._runtime = runtime   # keeps the runtime (and its device context) alive while this lives
        self._handle = handle
        self.spec = spec
        self.layout = layout_name
        self._q = q_described
        # An fp16/bf16 spec may run straight from the inputs rather than a copy: keep them alive too.
        self._inputs = inputs
        raw = runtime._lib.qattn_prepared_kernel_name(handle)
        self.kernel_name = raw.decode("utf-8") if raw else ""

    @property
    def closed(self):
        return self._handle is None

    def run(self, out=None, softmax_scale=None, lse=None):
        """Launches the attention kernel on the current stream; returns out (allocated when None)."""
        if self._handle is None:
            raise BadInput("this qattn Prepared is closed")
        rt = self._runtime
        o = _output("out", out, self._q, self.layout, self.spec)
        _check_same_device(rt, (("out", o.tensor),))
        heads_q = self._q.dims[2]
        lse_ptr = _lse_pointer(lse, self._q.dims, heads_q, rt.device)
        with rt._call() as rt_handle:
            if self._handle is None:
                raise BadInput("this qattn Prepared is closed")
            check(rt._lib, rt._lib.qattn_run_prepared(rt_handle, self._handle, o.c, _scale(softmax_scale), lse_ptr,
                                                      rt._stream()),
                  "qattn_run_prepared")
        return o.tensor

    def close(self):
        if self._handle is None:
            return
        self._runtime._lib.qattn_prepared_destroy(self._handle)
        self._handle = None
        self._inputs = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def version():
    """The library's version string, e.g. '0.1.0'."""
    raw = _library.load().qattn_version()
    return raw.decode("utf-8") if raw else ""
