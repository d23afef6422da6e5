"""`python -m qattn doctor`: what this machine offers qattn, one line per check.

Exit codes: 0 ready for GPU use; 1 usable for compile-only work (the library loads, but no CUDA driver or
no device); 2 the library is missing or broken (not found, does not load, or its version is not the
package's). PyTorch and the cache only inform: neither changes the code.
"""
import ctypes
import os

from . import _library, _search
from ._version import package_version

READY, COMPILE_ONLY, BROKEN = 0, 1, 2
VERDICTS = {READY: "ready for GPU use", COMPILE_ONLY: "usable for compile-only work (no GPU)",
            BROKEN: "the library is missing or broken"}

# cuDeviceGetAttribute's CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (cuda.h).
_CC_MAJOR, _CC_MINOR = 75, 76


def _mapped_file(fragment):
    """The first file mapped into this process whose name contains `fragment`, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and fragment in os.path.basename(fields[5]):
                    return fields[5]
    except OSError:
        pass
    return None


def check_package():
    return {"ok": True, "path": _search.package_dir(), "version": package_version()}


def check_library():
    try:
        lib = _library.load()
    except OSError as e:
        return {"ok": False, "error": str(e)}, None
    path, rule = _library.loaded_from()
    return {"ok": True, "path": path, "rule": rule}, lib


def check_library_version(lib, package):
    raw = lib.qattn_version()
    version = raw.decode("utf-8", "replace") if raw else ""
    matches = package is not None and version == package
    return {"ok": matches, "version": version, "package_version": package, "matches": matches}


def check_nvrtc():
    # libqattn needs libnvrtc (DT_NEEDED): loading it succeeded, so the loader found this one.
    path = _mapped_file("libnvrtc.so")
    return {"ok": path is not None, "path": path}


def check_driver():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"ok": False, "error": f"no CUDA driver ({e})", "devices": []}
    status = cuda.cuInit(0)
    if status != 0:
        return {"ok": False, "error": f"cuInit failed (CUresult {status})", "devices": []}
    version, count = ctypes.c_int(), ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        count.value = 0
    devices = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(device), ordinal)
        cuda.cuDeviceGetName(name, len(name), device)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device)
        devices.append({"index": ordinal, "name": name.value.decode("utf-8", "replace"),
                        "compute_capability": f"{major.value}.{minor.value}"})
    driver = f"{version.value // 1000}.{version.value % 1000 // 10}"
    result = {"ok": bool(devices), "driver_version": driver, "devices": devices}
    if not devices:
        result["error"] = "the CUDA driver sees no device"
    return result


def check_torch():
    try:
        import torch
    except ImportError:
        return {"ok": None, "installed": False}
    try:
        available = bool(torch.cuda.is_available())
    except Exception as e:   # a broken CUDA setup must not end the report
        return {"ok": False, "installed": True, "version": torch.__version__, "error": str(e)}
    return {"ok": available, "installed": True, "version": torch.__version__, "cuda_available": available}


def default_cache_path():
    """The file a Runtime() without cache_path uses: the library's rule (cache/cache_path.cpp)."""
    if os.environ.get("QATTN_CACHE_DIR"):
        return os.path.join(os.environ["QATTN_CACHE_DIR"], "qattn.db")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "qattn", "qattn.db")
    return os.path.join(os.path.expanduser("~"), ".cache", "qattn", "qattn.db")


def check_cache():
    from .runtime import Runtime
    path = default_cache_path()
    exists = os.path.isfile(path)
    try:
        # Read-only, or no cache while the file is not there: the doctor leaves the disk as it found it.
        with Runtime(read_only=True) if exists else Runtime(use_cache=False) as rt:
            status = rt.cache_status if exists else ""
    except Exception as e:
        return {"ok": False, "path": path, "exists": exists, "error": str(e)}
    result = {"ok": status == "", "path": path, "exists": exists, "status": status}
    if not exists:
        result["status"] = "not created yet (the first Runtime() creates it)"
    return result


def run_checks():
    """Every check as a dict; 'exit_code' and 'verdict' sum them up."""
    report = {"package": check_package()}
    report["library"], lib = check_library()
    code = READY
    if lib is None:
        code = BROKEN
    else:
        report["library_version"] = check_library_version(lib, report["package"]["version"])
        report["nvrtc"] = check_nvrtc()
        if not report["library_version"]["ok"]:
            code = BROKEN
    report["driver"] = check_driver()
    if code == READY and not report["driver"]["ok"]:
        code = COMPILE_ONLY
    report["torch"] = check_torch()
    if lib is not None:
        report["cache"] = check_cache()
    report["exit_code"] = code
    report["verdict"] = VERDICTS[code]
    return report


def _lines(report):
    package = report["package"]
    yield "package", f"qattn {package['version'] or '(version unknown)'} at {package['path']}"
    library = report["library"]
    if library["ok"]:
        yield "library", f"{library['path']} (found by rule: {library['rule']})"
    else:
        yield "library", "NOT LOADED: " + library["error"].replace("\n", "\n    ")
    if "library_version" in report:
        v = report["library_version"]
        same = "matches the package" if v["matches"] else f"DOES NOT MATCH the package's {v['package_version']}"
        yield "library version", f"{v['version']} ({same})"
    if "nvrtc" in report:
        n = report["nvrtc"]
        yield "libnvrtc", n["path"] if n["ok"] else "loaded, but its file is not visible in /proc/self/maps"
    d = report["driver"]
    if d.get("driver_version"):
        yield "CUDA driver", f"{d['driver_version']}, {len(d['devices'])} device(s)"
        for device in d["devices"]:
            yield f"  GPU {device['index']}", f"{device['name']} (compute capability {device['compute_capability']})"
    if d.get("error"):
        yield "CUDA driver" if not d.get("driver_version") else "GPU", d["error"]
    t = report["torch"]
    if not t["installed"]:
        yield "PyTorch", "not installed (only the calls that take tensors need it)"
    else:
        yield "PyTorch", f"{t['version']}, torch.cuda.is_available() = {t.get('cuda_available', t.get('error'))}"
    if "cache" in report:
        c = report["cache"]
        yield "cache", f"{c['path']}: " + (c.get("error") or c["status"] or "opens fine")
    yield "result", f"{report['verdict']} (exit code {report['exit_code']})"


def format_report(report):
    return "\n".join(f"{name + ':':<17} {text}" for name, text in _lines(report))
