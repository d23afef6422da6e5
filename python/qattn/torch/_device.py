"""One qattn Runtime per CUDA device for the torch calls, created on first use, never tuning on the hot
path (a stored winner from the user or shipped cache, else the default tiling), and the device facts
the format rules need."""
import threading

import torch

from ..runtime import Runtime

_lock = threading.Lock()
_runtimes = {}
_capabilities = {}
_retired = []


def device_index(tensor):
    index = tensor.device.index
    return torch.cuda.current_device() if index is None else index


def runtime(index):
    """The Runtime the torch calls use on device `index` (tune=False unless set_runtime gave another)."""
    rt = _runtimes.get(index)
    if rt is None:
        with _lock:
            rt = _runtimes.get(index)
            if rt is None:
                rt = Runtime(tune=False, device=index)
                _runtimes[index] = rt
    return rt


def set_runtime(rt, index=None):
    """Makes `rt` (a qattn.Runtime) the one the torch calls use on its device, e.g. one opened with a
    shipped cache (`Runtime(shipped_cache_path=..., tune=False)`). The previous runtime is kept alive for
    the process's life: work already queued, and CUDA graphs captured through it, still use its
    workspaces."""
    if not isinstance(rt, Runtime):
        raise TypeError(f"set_runtime takes a qattn.Runtime, not {type(rt).__name__}")
    index = rt.device if index is None else int(index)
    with _lock:
        old = _runtimes.get(index)
        if old is not None and old is not rt:
            _retired.append(old)   # its workspaces may still be read by queued kernels or captured graphs
        _runtimes[index] = rt
    _forget_plans()


def capability(index):
    cap = _capabilities.get(index)
    if cap is None:
        cap = torch.cuda.get_device_capability(index)
        _capabilities[index] = cap
    return cap


_plan_caches = []


def register_plan_cache(cache):
    """Caches keyed by call shape that hold a runtime: cleared when set_runtime swaps it."""
    _plan_caches.append(cache)


def _forget_plans():
    for cache in _plan_caches:
        cache.clear()
