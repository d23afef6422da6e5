"""Runtime.attention_varlen without a GPU: the wrapper's pure-Python checks of packed tensors, offsets and
bounds (no torch needed), and, with $QATTN_LIBRARY, the ctypes prototype of qattn_attention_varlen
against the library's own refusals (each argument where the C side expects it)."""
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
