"""One qattn Runtime per CUDA device for the torch calls, created on first use, never tuning on the hot
path (a stored winner from the user or shipped cache, else the default tiling), and the device facts
the format rules need."""
import ctypes
import threading

import torch

from .. import _library
from ..errors import BadInput, check
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


class PlanHandle:
    """A qattn plan made for the torch calls (decode, linear): its runtime and device, the C handle
    (destroyed with this object), the arguments each run copies and the workspace a run needs."""
    __slots__ = ("runtime", "device", "index", "handle", "workspace_bytes", "args", "kind", "_destroy")

    def __init__(self, runtime, index, handle, args, kind):
        self.runtime = runtime
        self.device, self.index = torch.device("cuda", index), index
        self.handle = handle
        self.workspace_bytes = 0
        self.args = args
        self.kind = kind
        self._destroy = getattr(runtime._lib, f"qattn_{kind}_plan_destroy")

    def run(self, args, workspace, stream):
        """One qattn_<kind>_plan_run with `args` (a copy of self.args with the pointers set)."""
        lib = self.runtime._lib
        run = getattr(lib, f"qattn_{self.kind}_plan_run")
        status = run(open_handle(self.runtime), self.handle, ctypes.byref(args),
                     None if workspace is None else workspace.data_ptr(), stream)
        if status:
            check(lib, status, f"qattn_{self.kind}_plan_run")

    def __del__(self):
        if self.handle is not None:
            self._destroy(self.handle)
            self.handle = None


def open_handle(rt):
    """The runtime's C handle, or BadInput when it was closed under the torch calls."""
    handle = rt._handle
    if handle is None:
        raise BadInput("the qattn Runtime of this device was closed; give the torch calls another with "
                       "qattn.torch.set_runtime")
    return handle


def make_plan(rt, index, args, kind):
    """A PlanHandle over qattn_<kind>_plan_create (kind: decode, linear) with the caller's workspace (every
    run passes one of its workspace_bytes)."""
    lib = rt._lib
    create, size = getattr(lib, f"qattn_{kind}_plan_create"), getattr(lib, f"qattn_{kind}_plan_workspace_bytes")
    handle, ws = ctypes.c_void_p(), ctypes.c_int64()
    with rt._call() as rt_handle:
        check(lib, create(rt_handle, ctypes.byref(args), _library.PLAN_CALLER_WORKSPACE, ctypes.byref(handle)),
              f"qattn_{kind}_plan_create")
    p = PlanHandle(rt, index, handle.value, args, kind)
    check(lib, size(p.handle, ctypes.byref(ws)), f"qattn_{kind}_plan_workspace_bytes")
    p.workspace_bytes = ws.value
    return p
