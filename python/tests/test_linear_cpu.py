"""Linear layers through the wrapper without a GPU: the ctypes struct against the library's defaults,
and the refusals made before any GPU work (the C++ call's checks and the wrapper's own)."""
import ctypes
import os

import pytest

import qattn
from qattn import _library

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")

SPEC = "linear a=fp16 w=int8:per_channel out=fp16 n=256 k=4096"
ALIGNED = 1 << 20   # a stand-in device address: never dereferenced by a refused call


@needs_library
def test_linear_args_match_the_library_layout():
    lib = _library.load()
    a = _library.LinearArgs()
    assert lib.qattn_linear_args_init(ctypes.byref(a), ctypes.sizeof(a)) == 0
    assert a.struct_size == ctypes.sizeof(a)
    assert (a.m, a.splits, a.lda, a.ldw, a.ldc, a.tiling, a.spec) == (0, 0, 0, 0, 0, None, None)


@needs_library
def test_malformed_linear_calls_are_refused_before_the_gpu():
    with qattn.Runtime(use_cache=False) as rt:
        with pytest.raises(qattn.BadInput, match="m >= 1"):
            rt.linear(SPEC, ALIGNED, ALIGNED, ALIGNED, m=0, w_scale=ALIGNED)
        with pytest.raises(qattn.BadInput, match="weights.scale is null"):
            rt.linear(SPEC, ALIGNED, ALIGNED, ALIGNED, m=3)
        with pytest.raises(qattn.BadInput, match="not 16-byte aligned"):
            rt.linear(SPEC, ALIGNED + 2, ALIGNED, ALIGNED, m=3, w_scale=ALIGNED)
        with pytest.raises(qattn.BadInput, match="spec has no bias"):
            rt.linear(SPEC, ALIGNED, ALIGNED, ALIGNED, m=3, w_scale=ALIGNED, bias=ALIGNED)
        with pytest.raises(qattn.BadInput, match="takes a linear spec"):
            rt.linear("decode qk=fp16 pv=fp16 out=fp16 d=128", ALIGNED, ALIGNED, ALIGNED, m=3)
        with pytest.raises(qattn.BadInput, match="linear specs take no d="):
            rt.linear(SPEC + " d=64", ALIGNED, ALIGNED, ALIGNED, m=3)
        with pytest.raises(qattn.BadInput, match="m \\(tokens\\) is needed"):
            rt.linear(SPEC, ALIGNED, ALIGNED, ALIGNED)
        with pytest.raises(qattn.BadInput, match="splits must be"):
            rt.linear(SPEC, ALIGNED, ALIGNED, ALIGNED, m=3, splits=-2)


@needs_library
def test_tune_linear_refuses_what_it_cannot_sweep():
    with qattn.Runtime(use_cache=False) as rt:
        with pytest.raises(qattn.BadInput, match="tune_linear takes a linear spec"):
            rt.tune_linear("prefill qk=fp16 pv=fp16 out=fp16 d=128")
        with pytest.raises(qattn.BadInput, match="rows must be a list of ints"):
            rt.tune_linear(SPEC, rows=[1, "8"])
