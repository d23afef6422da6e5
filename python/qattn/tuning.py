"""Decode tuning (Runtime.tune_decode / decode_tuned) and the unified-max calibration
(calibrate_unified_max, host code) over the C API."""
import ctypes
import json

from . import _library
from .errors import BadInput, check

SAMPLES = {"row_maxima": 0, "row_lse": 1, "scores": 2}


def _int_array(name, values, ctype):
    values = list(values)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadInput(f"{name} must hold ints, got {type(v).__name__}")
    return (ctype * len(values))(*values), len(values)


def tune_decode(runtime, spec, kv_lens=None, rows=None, batch_heads=None, splits=None, heads_kv=None, batch=None,
                min_split_tokens=None, q_len=None, tolerance=None):
    """Runs decode's dataflow and split sweeps for the spec's family on the runtime's device, stores both
    decisions and returns them ({"dataflow": ..., "splits": ...}). None: the library's default."""
    lib = runtime._lib
    o = _library.TuneDecodeOptions()
    check(lib, lib.qattn_tune_decode_options_init(ctypes.byref(o), ctypes.sizeof(o)), "qattn_tune_decode_options_init")
    keep = []
    for name, values, ctype in (("kv_lens", kv_lens, ctypes.c_int), ("rows", rows, ctypes.c_int),
                                ("batch_heads", batch_heads, ctypes.c_int64), ("splits", splits, ctypes.c_int)):
        if values is not None:
            array, count = _int_array(name, values, ctype)
            keep.append(array)
            setattr(o, name, ctypes.cast(array, ctypes.POINTER(ctype)))
            setattr(o, name + "_count", count)
    for name, value in (("heads_kv", heads_kv), ("batch", batch), ("min_split_tokens", min_split_tokens),
                        ("q_len", q_len)):
        if value is not None:
            setattr(o, name, int(value))
    if tolerance is not None:
        o.tolerance = float(tolerance)
    spec_b = spec.encode("utf-8") if isinstance(spec, str) else None
    if spec_b is None:
        raise BadInput(f"spec must be a str, not {type(spec).__name__}")
    needed = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(1 << 20)
    with runtime._call() as handle:
        check(lib, lib.qattn_tune_decode(handle, spec_b, ctypes.byref(o), buf, len(buf), ctypes.byref(needed)),
              "qattn_tune_decode")
    if needed.value > len(buf):
        raise BadInput(f"the tuning decisions take {needed.value} bytes, more than the {len(buf)} read back")
    return json.loads(buf.value.decode("utf-8"))


def decode_tuned(runtime, spec):
    """True when both decode decisions of the spec's family are stored for this device and toolchain."""
    lib = runtime._lib
    out = ctypes.c_int(0)
    with runtime._call() as handle:
        check(lib, lib.qattn_decode_tuned(handle, spec.encode("utf-8"), ctypes.byref(out)), "qattn_decode_tuned")
    return bool(out.value)


def calibrate_unified_max(values, sample="row_maxima", coverage=None, window=None, min_headroom=None,
                          keys_per_row=None):
    """phi for softmax=unified_max from observed samples (floats; -inf skipped). Returns a dict with
    enabled, phi, lo, hi (ready for Runtime.decode(unified_max=(phi, lo, hi))), the interval, the row
    maxima range, headroom, samples and reason."""
    lib = _library.load()
    if sample not in SAMPLES:
        raise BadInput(f"sample '{sample}' is not accepted; accepted: {', '.join(SAMPLES)}")
    o = _library.UnifiedMaxOptions()
    check(lib, lib.qattn_unified_max_options_init(ctypes.byref(o), ctypes.sizeof(o)), "qattn_unified_max_options_init")
    o.sample = SAMPLES[sample]
    if coverage is not None:
        o.coverage = float(coverage)
    if window is not None:
        o.window_lo, o.window_hi = (float(w) for w in window)
    if min_headroom is not None:
        o.min_headroom = float(min_headroom)
    if keys_per_row is not None:
        o.keys_per_row = float(keys_per_row)
    data = [float(v) for v in values]
    array = (ctypes.c_double * len(data))(*data)
    out = _library.UnifiedMaxCalibration()
    out.struct_size = ctypes.sizeof(out)
    check(lib, lib.qattn_calibrate_unified_max(array, len(data), ctypes.byref(o), ctypes.byref(out)),
          "qattn_calibrate_unified_max")
    return {"enabled": bool(out.enabled), "phi": out.params.phi, "lo": out.params.lo, "hi": out.params.hi,
            "interval": (out.interval_lo, out.interval_hi), "max_range": (out.max_lo, out.max_hi),
            "headroom": out.headroom, "samples": out.samples, "reason": out.reason.decode("utf-8", "replace")}

