"""The decode half of the wrapper without a GPU: KV cache sizes, the ctypes structs against the C
library's defaults (a field at the wrong offset reads the wrong default), versioned options with the
shipped cache, and the wrapper's own argument checks."""
import ctypes
import os

import pytest

import qattn
from qattn import _library

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")

INT8 = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4"


@needs_library
def test_kv_sizes_follow_the_row_layout():
    assert qattn.kv_row_bytes(INT8) == 4 + 128
    assert qattn.kv_row_bytes("decode qk=int4:per_group pv=int4:per_group out=fp16 d=64") == 16 + 32
    assert qattn.kv_cache_bytes(INT8, 2, 8, 1024) == 2 * 8 * 1024 * 132
    with pytest.raises(qattn.BadInput, match="takes a decode spec"):
        qattn.kv_row_bytes("prefill qk=fp16 pv=fp16 out=fp16 d=128")
    with pytest.raises(qattn.BadInput, match="must be >= 1"):
        qattn.kv_cache_bytes(INT8, 2, 8, 0)
    with pytest.raises(qattn.BadInput, match="spec must be a str"):
        qattn.kv_row_bytes(None)


@needs_library
def test_structs_match_the_library_layout():
    lib = _library.load()
    d = _library.DecodeArgs()
    assert lib.qattn_decode_args_init(ctypes.byref(d), ctypes.sizeof(d)) == 0
    assert d.struct_size == ctypes.sizeof(d)
    assert (d.unified_max.lo, d.unified_max.hi, d.unified_max.enabled) == (-9.0, 8.0, 1)
    assert d.tiling is None and d.splits == 0
    a = _library.AppendArgs()
    assert lib.qattn_append_args_init(ctypes.byref(a), ctypes.sizeof(a)) == 0
    assert (a.batch, a.heads_kv, a.n_new, a.start) == (1, 1, 1, None)
    assert (a.k_mean, a.init_k_mean, d.k_mean) == (None, 0, None)
    cp = _library.CachePrefillArgs()
    assert lib.qattn_cache_prefill_args_init(ctypes.byref(cp), ctypes.sizeof(cp)) == 0
    assert cp.struct_size == ctypes.sizeof(cp) and cp.k_mean is None and cp.spec is None
    fp = _library.FlashQPrefillArgs()
    assert lib.qattn_flashq_prefill_args_init(ctypes.byref(fp), ctypes.sizeof(fp)) == 0
    assert fp.struct_size == ctypes.sizeof(fp) and not fp.cache and not fp.lens
    fa = _library.FlashQAppendArgs()
    assert lib.qattn_flashq_append_args_init(ctypes.byref(fa), ctypes.sizeof(fa)) == 0
    assert fa.struct_size == ctypes.sizeof(fa) and fa.n_new >= 0
    # The C header's qattn_flashq_cache: 8 pointers-or-int64s, 2 ints, 4 pointers, 2 host pointers,
    # 2 int64s and 4 pointers on a 64-bit ABI.
    assert ctypes.sizeof(_library.FlashQCache) == 8 * 4 + 4 * 2 + 8 * 12
    page = ctypes.c_int64()
    assert lib.qattn_flashq_page_bytes(128, 2, None, ctypes.byref(page)) == 0 and page.value > 0
    two_bit = (ctypes.c_int * 2)(2, 2)
    small = ctypes.c_int64()
    assert lib.qattn_flashq_page_bytes(128, 2, two_bit, ctypes.byref(small)) == 0 and 0 < small.value < page.value
    o = _library.Options()
    assert lib.qattn_options_init(ctypes.byref(o), ctypes.sizeof(o)) == 0
    assert (o.use_cache, o.read_only, o.tune, o.device, o.shipped_cache_path) == (1, 0, 1, 0, None)


@needs_library
def test_shipped_cache_option_reaches_the_runtime(tmp_path):
    shipped = tmp_path / "missing" / "shipped.db"
    with qattn.Runtime(cache_path=tmp_path / "user.db", shipped_cache_path=shipped) as rt:
        assert str(shipped) in rt.cache_status


@needs_library
def test_kv_cache_checks_its_arguments():
    cache = qattn.KvCache(0x10000, 0x20000, capacity=256)
    assert (cache.c.k, cache.c.v, cache.c.capacity, cache.c.block_table) == (0x10000, 0x20000, 256, None)
    with pytest.raises(qattn.BadInput, match="k is None"):
        qattn.KvCache(None, 0x20000, capacity=256)
    with pytest.raises(qattn.BadInput, match="device address"):
        qattn.KvCache("0x10", 0x20000, capacity=256)
    assert qattn.KvCache(0x10000, 0x20000, capacity=256, k_mean=0x30000).k_mean == 0x30000   # K smoothing
    assert cache.k_mean is None
    with pytest.raises(qattn.BadInput, match="k_mean must be"):
        qattn.KvCache(0x10000, 0x20000, capacity=256, k_mean="0x30000")


@needs_library
def test_unified_max_calibration_places_the_maxima_inside_the_window():
    maxima = [5.0 + 2.0 * ((i * 37) % 100) / 100.0 for i in range(200)]   # in [5, 7)
    c = qattn.calibrate_unified_max(maxima)
    assert c["enabled"] and c["samples"] == 200 and c["reason"] == ""
    assert c["phi"] + c["lo"] < 5.0 and c["phi"] + c["hi"] > 7.0
    spread = qattn.calibrate_unified_max([-400.0, 400.0] * 50)
    assert not spread["enabled"] and spread["reason"]
    with pytest.raises(qattn.BadInput, match="accepted: row_maxima"):
        qattn.calibrate_unified_max(maxima, sample="maxima")
    with pytest.raises(qattn.BadInput):
        qattn.calibrate_unified_max([float("nan")])


@needs_library
def test_tune_decode_options_match_the_library_layout(tmp_path):
    lib = _library.load()
    t = _library.TuneDecodeOptions()
    assert lib.qattn_tune_decode_options_init(ctypes.byref(t), ctypes.sizeof(t)) == 0
    assert (t.heads_kv, t.batch, t.min_split_tokens, t.q_len, t.tolerance) == (8, 1, 256, 1, 0.03)
    with qattn.Runtime(cache_path=tmp_path / "c.db") as rt:
        with pytest.raises(qattn.BadInput, match="kv_lens must hold ints"):
            rt.tune_decode(INT8, kv_lens=[1024.5])
