"""Runtime.attention_varlen without a GPU: the wrapper's pure-Python checks of packed tensors, offsets and
bounds (no torch needed), the wrapper's whole path with stand-ins for torch and the library (what it
passes to qattn_attention_varlen, and what it refuses before), and, with $QATTN_LIBRARY, the ctypes
prototype against the library's own refusals (each argument where the C side expects it)."""
import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import qattn  # noqa: E402
from qattn import _library, layout  # noqa: E402

SPEC = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k"

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")


def test_varlen_token_is_added_once():
    assert layout.with_varlen(SPEC) == SPEC + " varlen"
    assert layout.with_varlen(SPEC + " varlen") == SPEC + " varlen"
    assert layout.with_varlen("prefill varlen qk=fp16 pv=fp16 out=fp16 d=64 ") == \
        "prefill varlen qk=fp16 pv=fp16 out=fp16 d=64 "
    # a token that merely contains the word is not the flag
    assert layout.with_varlen("prefill qk=fp16 pv=fp16 out=fp16 d=64 novarlen").endswith("novarlen varlen")


def test_packed_strides_leave_the_batch_stride_to_the_offsets():
    # [10 tokens, 4 heads, 128] with padded token rows: element strides (1024, 128, 1)
    dims, strides = layout.decompose_packed("q", (10, 4, 128), (1024, 128, 1))
    assert dims == (10, 4, 128) and strides == (0, 128, 1024)   # (sb, sh, ss)
    # a head-major view (q.transpose of a [h, tokens, d] tensor) keeps its own strides
    dims, strides = layout.decompose_packed("k", (10, 2, 64), (64, 640, 1))
    assert strides == (0, 640, 64)


def test_packed_tensors_are_refused_with_what_is_accepted():
    with pytest.raises(qattn.BadInput, match=r"4 dimensions; attention_varlen takes packed 3-d tensors"):
        layout.decompose_packed("q", (1, 10, 4, 128), (5120, 512, 128, 1))
    with pytest.raises(qattn.BadInput, match="head-dim stride 2"):
        layout.decompose_packed("v", (10, 4, 64), (512, 128, 2))
    with pytest.raises(qattn.BadInput, match="spec says d=128"):
        layout.check_packed_problem(SPEC, (10, 8, 64), (12, 2, 64), (12, 2, 64))
    with pytest.raises(qattn.BadInput, match="must match"):
        layout.check_packed_problem(SPEC, (10, 8, 128), (12, 2, 128), (11, 2, 128))
    with pytest.raises(qattn.BadInput, match="q has head dim 64 but k and v have 128"):
        layout.check_packed_problem("prefill qk=fp16", (10, 8, 64), (12, 2, 128), (12, 2, 128))
    # GQA is the C side's: any head counts pass here
    assert layout.check_packed_problem(SPEC, (10, 8, 128), (12, 3, 128), (12, 3, 128)) == (8, 3)


def test_offsets_and_bounds_are_checked():
    assert layout.check_cu_seqlens("cu_seqlens_q", (4,), "int32", True) == 3
    with pytest.raises(qattn.BadInput, match="cu_seqlens_q is int64; accepted: int32"):
        layout.check_cu_seqlens("cu_seqlens_q", (4,), "int64", True)
    with pytest.raises(qattn.BadInput, match=r"cu_seqlens_kv has shape \[1\]; expected 1-d \[batch \+ 1\]"):
        layout.check_cu_seqlens("cu_seqlens_kv", (1,), "int32", True)
    with pytest.raises(qattn.BadInput, match=r"shape \[2, 2\]"):
        layout.check_cu_seqlens("cu_seqlens_kv", (2, 2), "int32", True)
    with pytest.raises(qattn.BadInput, match="not contiguous"):
        layout.check_cu_seqlens("cu_seqlens_q", (4,), "int32", False)
    with pytest.raises(qattn.BadInput, match="4 entries but cu_seqlens_kv has 3"):
        layout.check_same_batch(3, 2)
    layout.check_same_batch(3, 3)
    assert layout.check_max_seqlen("max_seqlen_q", 130) == 130
    with pytest.raises(qattn.BadInput, match="max_seqlen_kv is 0; it must be >= 1"):
        layout.check_max_seqlen("max_seqlen_kv", 0)
    for bad in (True, 12.0, "12", None):
        with pytest.raises(qattn.BadInput, match="max_seqlen_q must be an int"):
            layout.check_max_seqlen("max_seqlen_q", bad)


def test_lse_must_be_packed_rows_by_heads():
    layout.check_packed_lse((148, 8), "float32", True, 148, 8)
    for sizes, dtype, contiguous in (((8, 148), "float32", True), ((1, 8, 148), "float32", True),
                                     ((148, 8), "float16", True), ((148, 8), "float32", False)):
        with pytest.raises(qattn.BadInput, match=r"contiguous float32 \[total_q, hq\] = \[148, 8\]"):
            layout.check_packed_lse(sizes, dtype, contiguous, 148, 8)


def _call(lib, rt, spec, cu_q, cu_kv):
    """qattn_attention_varlen on fake (never dereferenced) device addresses: refused before any launch."""
    shape = _library.Shape(3, 8, 2, 130, 130)
    q = _library.Tensor(0x10000, 0, 128, 1024)
    kv = _library.Tensor(0x20000, 0, 128, 256)
    status = lib.qattn_attention_varlen(rt._handle, spec.encode(), shape, q, kv, kv, q, cu_q, cu_kv,
                                        ctypes.c_float(0.0), None, None)
    return status, lib.qattn_last_error().decode()


@needs_library
def test_prototype_passes_each_argument_where_the_library_reads_it(tmp_path):
    lib = _library.load()
    with qattn.Runtime(cache_path=tmp_path / "c.db") as rt:
        assert _call(lib, rt, SPEC, None, 0x50000) == (qattn.errors.BAD_INPUT, "cu_seqlens_q is NULL")
        assert _call(lib, rt, SPEC, 0x40000, None) == (qattn.errors.BAD_INPUT, "cu_seqlens_kv is NULL")
        status, message = _call(lib, rt, "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4",
                                0x40000, 0x50000)
        assert status == qattn.errors.BAD_INPUT and "varlen applies to prefill" in message, message


def test_attention_varlen_is_a_runtime_method():
    # the wrapper's signature, as documented in python/README.md
    import inspect
    params = list(inspect.signature(qattn.Runtime.attention_varlen).parameters)
    assert params == ["self", "q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "max_seqlen_q", "max_seqlen_kv",
                      "spec", "out", "softmax_scale", "lse"]


# -- the wrapper's path through Runtime.attention_varlen, with stand-ins for torch and the library ----
# (a fake torch tensor has no memory: the recorded C call is checked, never made)

class _Dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name

    def __eq__(self, other):
        return self.name == other.name

    def __hash__(self):
        return hash(self.name)


class _FakeTensor:
    next_address = 0x100000

    def __init__(self, shape, dtype, strides=None, cuda=True, device=0):
        self.shape, self.dtype, self.is_cuda = tuple(shape), _Dtype(dtype), cuda
        self.device = type("Device", (), {"index": device if cuda else None,
                                          "__str__": lambda s: "cpu" if s.index is None else f"cuda:{s.index}"})()
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)
        _FakeTensor.next_address += 0x10000
        self._address = _FakeTensor.next_address

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._address

    def is_contiguous(self):
        return True


def _fake_torch():
    import types
    torch = types.ModuleType("torch")
    torch.Tensor = _FakeTensor
    torch.contiguous_format = object()
    torch.empty_like = lambda t, memory_format=None: _FakeTensor(t.shape, t.dtype.name)
    torch.cuda = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=0x77))
    return torch


class _RecordingLibrary:
    def __init__(self):
        self.calls = []

    def qattn_attention_varlen(self, *args):
        self.calls.append(args)
        return 0


def _fake_runtime(lib):
    import contextlib
    import types
    return types.SimpleNamespace(device=0, _lib=lib, _call=lambda: contextlib.nullcontext(0xABC))


@pytest.fixture
def fake_torch(monkeypatch):
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def _inputs():
    q = _FakeTensor((148, 8, 128), "float16", strides=(2048, 256, 1))   # padded token rows
    k = _FakeTensor((171, 2, 128), "float16", strides=(128, 171 * 128, 1))   # head-major
    v = _FakeTensor((171, 2, 128), "float16")
    return q, k, v, _FakeTensor((4,), "int32"), _FakeTensor((4,), "int32")


def test_wrapper_passes_packed_strides_offsets_bounds_and_the_varlen_token(fake_torch):
    from qattn import varlen
    lib = _RecordingLibrary()
    q, k, v, cu_q, cu_kv = _inputs()
    lse = _FakeTensor((148, 8), "float32")
    out = varlen.attention_varlen(_fake_runtime(lib), q, k, v, cu_q, cu_kv, 130, 129, SPEC, None, 0.5, lse)
    (handle, spec, shape, cq, ck, cv, co, pq, pkv, scale, plse, stream), = lib.calls
    assert (handle, spec, stream) == (0xABC, (SPEC + " varlen").encode(), 0x77)
    assert (shape.batch, shape.heads_q, shape.heads_kv, shape.q_len, shape.kv_len) == (3, 8, 2, 130, 129)
    assert (cq.data, cq.sb, cq.sh, cq.ss) == (q.data_ptr(), 0, 256, 2048)
    assert (ck.sb, ck.sh, ck.ss) == (0, 171 * 128, 128) and (cv.sb, cv.sh, cv.ss) == (0, 128, 256)
    assert out.shape == q.shape and (co.data, co.sh, co.ss) == (out.data_ptr(), 128, 1024)
    assert (pq, pkv, scale, plse) == (cu_q.data_ptr(), cu_kv.data_ptr(), 0.5, lse.data_ptr())


def test_wrapper_refuses_before_calling_the_library(fake_torch):
    from qattn import varlen
    lib = _RecordingLibrary()
    q, k, v, cu_q, cu_kv = _inputs()
    cases = [
        (dict(cu_q=_FakeTensor((4,), "int64")), "cu_seqlens_q is int64; accepted: int32"),
        (dict(cu_kv=_FakeTensor((3,), "int32")), "4 entries but cu_seqlens_kv has 3"),
        (dict(cu_q=_FakeTensor((4,), "int32", cuda=False)), "cu_seqlens_q is on cpu; qattn needs CUDA tensors"),
        (dict(cu_kv=_FakeTensor((4,), "int32", device=1)), "cu_seqlens_kv is on cuda:1 but the runtime drives cuda:0"),
        (dict(lse=_FakeTensor((8, 148), "float32")), r"\[total_q, hq\] = \[148, 8\]"),
        (dict(q=_FakeTensor((148, 8, 128), "bfloat16")), "spec says out=fp16"),
        (dict(out=_FakeTensor((148, 8, 128), "float32")), "out is float32; accepted: float16, bfloat16"),
        (dict(out=_FakeTensor((147, 8, 128), "float16")), "out is float16 .* they must match"),
        (dict(q=_FakeTensor((1, 148, 8, 128), "float16")), "packed 3-d tensors"),
        (dict(max_q=0), "max_seqlen_q is 0"),
        (dict(spec=None), "spec must be a str"),
    ]
    for change, message in cases:
        a = dict(q=q, k=k, v=v, cu_q=cu_q, cu_kv=cu_kv, max_q=130, max_kv=130, spec=SPEC, out=None, lse=None)
        a.update(change)
        with pytest.raises(qattn.BadInput, match=message):
            varlen.attention_varlen(_fake_runtime(lib), a["q"], a["k"], a["v"], a["cu_q"], a["cu_kv"], a["max_q"],
                                    a["max_kv"], a["spec"], a["out"], None, a["lse"])
    assert lib.calls == []


@needs_library
def test_library_refuses_a_decode_spec_through_the_wrapper(fake_torch, tmp_path):
    q, k, v, cu_q, cu_kv = _inputs()
    with qattn.Runtime(cache_path=tmp_path / "c.db") as rt:
        with pytest.raises(qattn.BadInput, match="varlen applies to prefill") as info:
            rt.attention_varlen(q, k, v, cu_q, cu_kv, 130, 130,
                                "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4")
    assert info.value.call == "qattn_attention_varlen"
