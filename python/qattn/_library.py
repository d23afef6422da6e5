"""Loading libqattn.so (the search order is _search.py's) and declaring the C prototypes of
include/qattn/qattn.h.

Loaded lazily (on the first Runtime or version() call) so that `import qattn` works on machines where
the library is not built yet, and so that $QATTN_LIBRARY can still be set after the import.
"""
import ctypes
import os
import threading

from . import _search
from ._search import LIBRARY_NAME, candidate_paths  # noqa: F401 (candidate_paths: the public API)


class Tensor(ctypes.Structure):
    """qattn_tensor: element (b, h, s, c) at data + b*sb + h*sh + s*ss + c (strides in elements)."""
    _fields_ = [("data", ctypes.c_void_p), ("sb", ctypes.c_int64), ("sh", ctypes.c_int64),
                ("ss", ctypes.c_int64)]


class Shape(ctypes.Structure):
    """qattn_shape."""
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("q_len", ctypes.c_int), ("kv_len", ctypes.c_int)]


class RuntimeOptions(ctypes.Structure):
    """qattn_runtime_options."""
    _fields_ = [("cache_path", ctypes.c_char_p), ("use_cache", ctypes.c_int), ("read_only", ctypes.c_int),
                ("tune", ctypes.c_int), ("device", ctypes.c_int)]


class Options(ctypes.Structure):
    """qattn_options (versioned: struct_size first; qattn_options_init fills the defaults)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("cache_path", ctypes.c_char_p), ("use_cache", ctypes.c_int),
                ("read_only", ctypes.c_int), ("tune", ctypes.c_int), ("device", ctypes.c_int),
                ("shipped_cache_path", ctypes.c_char_p)]


class KvCache(ctypes.Structure):
    """qattn_kv_cache (device pointers; strides in bytes, 0: the defaults)."""
    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("page_stride", ctypes.c_int64),
                ("head_stride", ctypes.c_int64), ("capacity", ctypes.c_int), ("page_size", ctypes.c_int),
                ("block_table", ctypes.c_void_p), ("table_stride", ctypes.c_int),
                ("k_head_scale", ctypes.c_void_p), ("v_head_scale", ctypes.c_void_p)]


class AppendArgs(ctypes.Structure):
    """qattn_append_args."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("batch", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("n_new", ctypes.c_int), ("reserved0", ctypes.c_int),
                ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("sb", ctypes.c_int64), ("sh", ctypes.c_int64),
                ("ss", ctypes.c_int64), ("cache", KvCache), ("start", ctypes.c_void_p),
                ("slot_mapping", ctypes.c_void_p), ("num_slots", ctypes.c_int64), ("k_mean", ctypes.c_void_p),
                ("init_k_mean", ctypes.c_int), ("reserved1", ctypes.c_int)]


class LinearArgs(ctypes.Structure):
    """qattn_linear_args."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("m", ctypes.c_int), ("splits", ctypes.c_int),
                ("a", ctypes.c_void_p), ("lda", ctypes.c_int64), ("w", ctypes.c_void_p), ("ldw", ctypes.c_int64),
                ("w_scale", ctypes.c_void_p), ("w_zero", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("c", ctypes.c_void_p), ("ldc", ctypes.c_int64), ("tiling", ctypes.c_char_p)]


class UnifiedMax(ctypes.Structure):
    """qattn_unified_max."""
    _fields_ = [("phi", ctypes.c_float), ("lo", ctypes.c_float), ("hi", ctypes.c_float), ("enabled", ctypes.c_int)]


class DecodeArgs(ctypes.Structure):
    """qattn_decode_args (flashq: a pointer to a FlashQCache for flashq specs, else NULL)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("shape", Shape), ("splits", ctypes.c_int),
                ("q", Tensor), ("o", Tensor), ("cache", KvCache), ("kv_lens", ctypes.c_void_p),
                ("flashq", ctypes.c_void_p), ("softmax_scale", ctypes.c_float), ("unified_max", UnifiedMax),
                ("lse", ctypes.c_void_p), ("row_flags", ctypes.c_void_p), ("tiling", ctypes.c_char_p),
                ("k_mean", ctypes.c_void_p)]


class CachePrefillArgs(ctypes.Structure):
    """qattn_cache_prefill_args."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("cache_spec", ctypes.c_char_p),
                ("shape", Shape), ("q", Tensor), ("o", Tensor), ("cu_seqlens_q", ctypes.c_void_p), ("cache", KvCache),
                ("kv_lens", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("softmax_scale", ctypes.c_float),
                ("reserved0", ctypes.c_int), ("k_mean", ctypes.c_void_p)]


class FlashQCache(ctypes.Structure):
    """qattn_flashq_cache (device pointers, except the host bit-width arrays k_bits / v_bits)."""
    _fields_ = [("k_blocks", ctypes.c_void_p), ("v_blocks", ctypes.c_void_p), ("k_page_stride", ctypes.c_int64),
                ("v_page_stride", ctypes.c_int64), ("max_blocks", ctypes.c_int), ("table_stride", ctypes.c_int),
                ("block_table", ctypes.c_void_p), ("heads", ctypes.c_void_p), ("k_bits", ctypes.POINTER(ctypes.c_int)),
                ("v_bits", ctypes.POINTER(ctypes.c_int)), ("k_buffer", ctypes.c_void_p), ("v_buffer", ctypes.c_void_p),
                ("buffer_page_stride", ctypes.c_int64), ("buffer_head_stride", ctypes.c_int64),
                ("compressed_lens", ctypes.c_void_p), ("buffer_lens", ctypes.c_void_p), ("k_scale8", ctypes.c_void_p),
                ("v_scale8", ctypes.c_void_p)]


class FlashQPrefillArgs(ctypes.Structure):
    """qattn_flashq_prefill_args."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("batch", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("n", ctypes.c_int), ("n_low", ctypes.c_int), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("sb", ctypes.c_int64), ("sh", ctypes.c_int64), ("ss", ctypes.c_int64),
                ("lens", ctypes.POINTER(ctypes.c_int)), ("cache", ctypes.POINTER(FlashQCache)),
                ("k_scale8", ctypes.POINTER(ctypes.c_float)), ("v_scale8", ctypes.POINTER(ctypes.c_float))]


class FlashQAppendArgs(ctypes.Structure):
    """qattn_flashq_append_args."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("spec", ctypes.c_char_p), ("batch", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("n_new", ctypes.c_int), ("reserved0", ctypes.c_int),
                ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("sb", ctypes.c_int64), ("sh", ctypes.c_int64),
                ("ss", ctypes.c_int64), ("cache", ctypes.POINTER(FlashQCache))]


class TuneDecodeOptions(ctypes.Structure):
    """qattn_tune_decode_options."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("kv_lens", ctypes.POINTER(ctypes.c_int)),
                ("rows", ctypes.POINTER(ctypes.c_int)), ("batch_heads", ctypes.POINTER(ctypes.c_int64)),
                ("splits", ctypes.POINTER(ctypes.c_int)), ("kv_lens_count", ctypes.c_int),
                ("rows_count", ctypes.c_int), ("batch_heads_count", ctypes.c_int), ("splits_count", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("batch", ctypes.c_int), ("min_split_tokens", ctypes.c_int),
                ("q_len", ctypes.c_int), ("tolerance", ctypes.c_double)]


class UnifiedMaxOptions(ctypes.Structure):
    """qattn_unified_max_options."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("sample", ctypes.c_int), ("reserved0", ctypes.c_int),
                ("coverage", ctypes.c_double), ("window_lo", ctypes.c_double), ("window_hi", ctypes.c_double),
                ("min_headroom", ctypes.c_double), ("keys_per_row", ctypes.c_double),
                ("row_keys", ctypes.POINTER(ctypes.c_int))]


class UnifiedMaxCalibration(ctypes.Structure):
    """qattn_unified_max_calibration."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("enabled", ctypes.c_int), ("reserved0", ctypes.c_int),
                ("params", UnifiedMax), ("interval_lo", ctypes.c_double), ("interval_hi", ctypes.c_double),
                ("max_lo", ctypes.c_double), ("max_hi", ctypes.c_double), ("headroom", ctypes.c_double),
                ("samples", ctypes.c_int64), ("reason", ctypes.c_char * 256)]


# Opaque handles stay c_void_p: ctypes then hands back plain ints (None for NULL), easy to store.
_RT = ctypes.c_void_p
_PREP = ctypes.c_void_p
_PLAN = ctypes.c_void_p
_STATUS = ctypes.c_int

PLAN_VARLEN = 1              # QATTN_PLAN_VARLEN
PLAN_CALLER_WORKSPACE = 2    # QATTN_PLAN_CALLER_WORKSPACE

# name: (restype, argtypes), exactly as in qattn.h.
PROTOTYPES = {
    "qattn_version": (ctypes.c_char_p, []),
    "qattn_last_error": (ctypes.c_char_p, []),
    "qattn_default_options": (RuntimeOptions, []),
    "qattn_runtime_create": (_STATUS, [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(_RT)]),
    "qattn_runtime_destroy": (None, [_RT]),
    "qattn_cache_status": (_STATUS, [_RT, ctypes.c_char_p, ctypes.c_size_t]),
    "qattn_compile": (_STATUS, [_RT, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "qattn_tune": (_STATUS, [_RT, ctypes.c_char_p, Shape, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_double)]),
    "qattn_attention": (_STATUS, [_RT, ctypes.c_char_p, Shape, Tensor, Tensor, Tensor, Tensor, ctypes.c_float,
                                  ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_attention_over_cache": (_STATUS, [_RT, ctypes.c_char_p, Shape, Tensor, Tensor, ctypes.c_void_p, ctypes.c_char_p,
                                             ctypes.POINTER(KvCache), ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p,
                                             ctypes.c_void_p]),
    "qattn_attention_varlen": (_STATUS, [_RT, ctypes.c_char_p, Shape, Tensor, Tensor, Tensor, Tensor, ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_prepare": (_STATUS, [_RT, ctypes.c_char_p, Shape, Tensor, Tensor, Tensor, ctypes.c_void_p,
                                ctypes.POINTER(_PREP)]),
    "qattn_run_prepared": (_STATUS, [_RT, _PREP, Tensor, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_prepared_kernel_name": (ctypes.c_char_p, [_PREP]),
    "qattn_prepared_destroy": (None, [_PREP]),
    "qattn_attention_plan_create": (_STATUS, [_RT, ctypes.c_char_p, Shape, Tensor, Tensor, Tensor, Tensor, ctypes.c_uint,
                                              ctypes.POINTER(_PLAN)]),
    "qattn_attention_plan_workspace_bytes": (_STATUS, [_PLAN, ctypes.POINTER(ctypes.c_int64)]),
    "qattn_attention_plan_kernel_name": (ctypes.c_char_p, [_PLAN]),
    "qattn_attention_plan_run": (_STATUS, [_RT, _PLAN, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_attention_plan_destroy": (None, [_PLAN]),
    "qattn_options_init": (_STATUS, [ctypes.POINTER(Options), ctypes.c_size_t]),
    "qattn_runtime_open": (_STATUS, [ctypes.POINTER(Options), ctypes.POINTER(_RT)]),
    "qattn_kv_row_bytes": (_STATUS, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]),
    "qattn_kv_cache_bytes": (_STATUS, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_int64)]),
    "qattn_append_args_init": (_STATUS, [ctypes.POINTER(AppendArgs), ctypes.c_size_t]),
    "qattn_decode_args_init": (_STATUS, [ctypes.POINTER(DecodeArgs), ctypes.c_size_t]),
    "qattn_append_kv": (_STATUS, [_RT, ctypes.POINTER(AppendArgs), ctypes.c_void_p]),
    "qattn_cache_prefill_args_init": (_STATUS, [ctypes.POINTER(CachePrefillArgs), ctypes.c_size_t]),
    "qattn_cache_prefill": (_STATUS, [_RT, ctypes.POINTER(CachePrefillArgs), ctypes.c_void_p]),
    "qattn_decode": (_STATUS, [_RT, ctypes.POINTER(DecodeArgs), ctypes.c_void_p]),
    "qattn_linear_args_init": (_STATUS, [ctypes.POINTER(LinearArgs), ctypes.c_size_t]),
    "qattn_linear_plan_create": (_STATUS, [_RT, ctypes.POINTER(LinearArgs), ctypes.c_uint, ctypes.POINTER(_PLAN)]),
    "qattn_linear_plan_workspace_bytes": (_STATUS, [_PLAN, ctypes.POINTER(ctypes.c_int64)]),
    "qattn_linear_plan_kernel_name": (ctypes.c_char_p, [_PLAN]),
    "qattn_linear_plan_run": (_STATUS, [_RT, _PLAN, ctypes.POINTER(LinearArgs), ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_linear_plan_destroy": (None, [_PLAN]),
    "qattn_tune_linear": (_STATUS, [_RT, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_size_t)]),
    "qattn_linear_tuned": (_STATUS, [_RT, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "qattn_linear": (_STATUS, [_RT, ctypes.POINTER(LinearArgs), ctypes.c_void_p]),
    "qattn_linear_route": (_STATUS, [_RT, ctypes.POINTER(LinearArgs), ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]),
    "qattn_decode_plan_create": (_STATUS, [_RT, ctypes.POINTER(DecodeArgs), ctypes.c_uint, ctypes.POINTER(_PLAN)]),
    "qattn_decode_plan_workspace_bytes": (_STATUS, [_PLAN, ctypes.POINTER(ctypes.c_int64)]),
    "qattn_decode_plan_kernel_name": (ctypes.c_char_p, [_PLAN]),
    "qattn_decode_plan_splits": (ctypes.c_int, [_PLAN]),
    "qattn_decode_plan_run": (_STATUS, [_RT, _PLAN, ctypes.POINTER(DecodeArgs), ctypes.c_void_p, ctypes.c_void_p]),
    "qattn_decode_plan_destroy": (None, [_PLAN]),
    "qattn_flashq_page_bytes": (_STATUS, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                          ctypes.POINTER(ctypes.c_int64)]),
    "qattn_flashq_buffer_bytes": (_STATUS, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
    "qattn_flashq_prefill_args_init": (_STATUS, [ctypes.POINTER(FlashQPrefillArgs), ctypes.c_size_t]),
    "qattn_flashq_append_args_init": (_STATUS, [ctypes.POINTER(FlashQAppendArgs), ctypes.c_size_t]),
    "qattn_flashq_prefill": (_STATUS, [_RT, ctypes.POINTER(FlashQPrefillArgs), ctypes.c_void_p]),
    "qattn_flashq_append": (_STATUS, [_RT, ctypes.POINTER(FlashQAppendArgs), ctypes.c_void_p]),
    "qattn_tune_decode_options_init": (_STATUS, [ctypes.POINTER(TuneDecodeOptions), ctypes.c_size_t]),
    "qattn_tune_decode": (_STATUS, [_RT, ctypes.c_char_p, ctypes.POINTER(TuneDecodeOptions), ctypes.c_char_p,
                                    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "qattn_decode_tuned": (_STATUS, [_RT, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "qattn_unified_max_options_init": (_STATUS, [ctypes.POINTER(UnifiedMaxOptions), ctypes.c_size_t]),
    "qattn_calibrate_unified_max": (_STATUS, [ctypes.POINTER(ctypes.c_double), ctypes.c_size_t,
                                              ctypes.POINTER(UnifiedMaxOptions),
                                              ctypes.POINTER(UnifiedMaxCalibration)]),
}


def _declare(lib):
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError(f"{lib._name} has no symbol {name}: not a qattn library, or an older one") from None
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lock = threading.Lock()
_loaded = None        # the ctypes library, once loaded: one per process, shared by every Runtime
_loaded_path = None
_loaded_rule = None


def _loaded_file(lib, fallback):
    """The file the dynamic loader opened for `lib` (loaded by name: the loader chose it)."""
    try:
        address = ctypes.cast(lib.qattn_version, ctypes.c_void_p).value
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= address < end and len(fields) >= 6:
                    return fields[5]
    except (OSError, ValueError, AttributeError):
        pass
    return fallback


def _open(candidate):
    try:
        lib = ctypes.CDLL(candidate.path)
    except OSError as e:
        if candidate.by_name:
            return None, str(e)
        # A library that is there but does not load is the one meant: report it, do not try another.
        raise OSError(f"cannot load {candidate.path} (found by rule '{candidate.rule}'): {e} (libqattn finds libnvrtc "
                      f"through its RUNPATH, the CUDA toolkit it was built against, or LD_LIBRARY_PATH)") from None
    return lib, None


def load(path=None):
    """Loads (once per process) and returns the ctypes library; `path` overrides the search."""
    global _loaded, _loaded_path, _loaded_rule
    with _lock:
        if _loaded is not None:
            if path and os.path.abspath(path) != _loaded_path:
                raise OSError(f"qattn is already loaded from {_loaded_path}; cannot switch to {path}")
            return _loaded
        if path:
            if not os.path.isfile(path):
                raise OSError(f"qattn library not found at {path} (from the path argument)")
            found = [_search.Candidate("path argument", path, False)]
        else:
            found = _search.candidates()
        tried = []
        for candidate in found:
            if not candidate.by_name and not os.path.isfile(candidate.path):
                if candidate.rule == _search.RULE_ENV:
                    raise _search.WrongLibraryVariable(_search.wrong_variable_message(
                        os.environ.get(_search.ENV_VARIABLE), candidate.path))
                tried.append((candidate, "no such file"))
                continue
            lib, why = _open(candidate)
            if lib is None:
                tried.append((candidate, why))
                continue
            resolved = os.path.abspath(candidate.path) if not candidate.by_name else \
                _loaded_file(lib, candidate.path)
            _loaded, _loaded_path, _loaded_rule = _declare(lib), resolved, candidate.rule
            return _loaded
        raise OSError(_search.not_found_message(tried))


def loaded_from():
    """(path, rule) of the library this process loaded, or None before the first load."""
    return (_loaded_path, _loaded_rule) if _loaded is not None else None
