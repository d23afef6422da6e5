#!/usr/bin/env python3
"""Where a cold compile's time goes: one rendered kernel compiled by NVRTC, stopped after each phase.

    python3 bench/nvrtc_phases.py KERNEL.cu [--templates templates] [--arch sm_90a] [--repeats 3]

KERNEL.cu comes from `qattn compile --spec S --arch A --no-cache --emit source --out KERNEL.cu`. Prints
the median CPU time (this process, user + system) of: an empty kernel (NVRTC's fixed cost), the front end
alone (-fdevice-syntax-only), front end + NVVM (PTX for compute_XX, no ptxas), the whole compile (cubin),
and the front end and the whole compile again with a precompiled header of the kernel's includes made
earlier in this process (-use-pch). With --fast-compile, instead: the whole compile at each of NVRTC's
-Ofast-compile levels (none, min, mid, max) with what ptxas reports of the result (registers, stack,
spills) and the cubin's size. NVRTC runs on the CPU: no GPU needed. Options as qattn's (-std=c++17 -default-device
-no-cache); the templates come from a directory instead of memory, which NVRTC reads alike.
"""
import argparse
import ctypes
import os
import statistics
import tempfile
import time

EMPTY = 'extern "C" __global__ void empty_kernel(int* p) { p[threadIdx.x] = 1; }\n'


def load_nvrtc():
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise SystemExit("nvrtc_phases.py: libnvrtc not found; set LD_LIBRARY_PATH=/usr/local/cuda/lib64")


def ptxas_report(nvrtc, source, options):
    """(CPU ms, ptxas's last "Used ... registers" line, cubin bytes) of one compile."""
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    argv = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    t0 = time.process_time()
    rc = nvrtc.nvrtcCompileProgram(prog, len(options), argv)
    ms = 1e3 * (time.process_time() - t0)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc:
        raise RuntimeError("compile failed (%d): %s" % (rc, text[:2000]))
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    used = [line.split("info    : ", 1)[-1].strip() for line in text.splitlines() if "registers" in line]
    return ms, (used[-1] if used else "?"), size.value


def compile_once(nvrtc, source, options):
    """CPU milliseconds of one nvrtcCompileProgram; raises on a compile error."""
    return ptxas_report(nvrtc, source, options)[0]


def fast_compile_levels(nvrtc, source, base, repeats):
    print("%-22s %10s %12s  %s" % ("-Ofast-compile", "cpu_ms", "cubin_bytes", "ptxas"))
    for level in (None, "min", "mid", "max"):
        opts = base + ([] if level is None else ["-Ofc=" + level])
        runs = [ptxas_report(nvrtc, source, opts) for _ in range(repeats)]
        ms = statistics.median(r[0] for r in runs)
        print("%-22s %10.1f %12d  %s" % (level or "(not set: qattn's)", ms, runs[-1][2], runs[-1][1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel")
    ap.add_argument("--templates", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates"))
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fast-compile", action="store_true", help="compare NVRTC's -Ofast-compile levels")
    a = ap.parse_args()
    nvrtc = load_nvrtc()
    source = open(a.kernel).read()
    base = ["-std=c++17", "-default-device", "-no-cache", "-I" + os.path.abspath(a.templates)]
    real = ["-arch=" + a.arch, "--ptxas-options=-v"]
    if a.fast_compile:
        return fast_compile_levels(nvrtc, source, base + real, a.repeats)
    pch = os.path.join(tempfile.mkdtemp(), "kernel.pch")
    compile_once(nvrtc, source, base + real + ["-create-pch=" + pch])
    phases = [
        ("empty kernel (NVRTC's fixed cost)", EMPTY, base + real),
        ("front end only (-fdevice-syntax-only)", source, base + real + ["-fdevice-syntax-only"]),
        ("front end only, with a PCH of its includes", source, base + real + ["-fdevice-syntax-only", "-use-pch=" + pch]),
        ("front end + NVVM (PTX, no ptxas)", source, base + ["-arch=" + a.arch.replace("sm_", "compute_")]),
        ("whole compile (cubin)", source, base + real),
        ("whole compile with a PCH of its includes", source, base + real + ["-use-pch=" + pch]),
    ]
    print("%-44s %10s   (median CPU ms of %d, %s)" % ("phase", "cpu_ms", a.repeats, os.path.basename(a.kernel)))
    for name, src, opts in phases:
        ms = statistics.median(compile_once(nvrtc, src, opts) for _ in range(a.repeats))
        print("%-44s %10.1f" % (name, ms))
    os.remove(pch)


if __name__ == "__main__":
    main()
