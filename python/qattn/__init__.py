"""qattn: quantized attention kernels compiled on demand (ctypes wrapper of include/qattn/qattn.h).

    import qattn
    rt = qattn.Runtime()
    out = rt.attention(q, k, v, "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=k")

The shared library is found through $QATTN_LIBRARY (a file, or a folder holding libqattn.so), else the
copy bundled by pip (qattn/lib/libqattn.so), the install prefix's, the repository's build folders
(<repo>/build*/lib/libqattn.so) or the system loader, in that order (_search.py). It is loaded on first
use, and PyTorch only by the calls that take tensors: importing needs neither.
`python -m qattn doctor` says what this machine has (library, libnvrtc, driver, GPUs, torch, cache).
"""
from ._library import candidate_paths, load as load_library
from .decode import KvCache, kv_cache_bytes, kv_row_bytes
from .errors import BadInput, NoGpu, QattnError
from .linear import pack_weight as pack_linear_weight, unpack_weight as unpack_linear_weight
from .runtime import Prepared, Runtime, version
from .tuning import calibrate_unified_max
from ._version import package_version as _package_version

__version__ = _package_version() or "unknown"

__all__ = ["Runtime", "Prepared", "QattnError", "BadInput", "NoGpu", "version", "load_library",
           "candidate_paths", "KvCache", "kv_row_bytes", "kv_cache_bytes", "calibrate_unified_max", "pack_linear_weight",
           "unpack_linear_weight", "__version__"]
