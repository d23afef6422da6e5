#!/usr/bin/env python3
"""Machine-code equality check for the prefill int8/int4 kernels across a template refactoring.

  scripts/sass_diff.py dump DIR [--qattn build/bin/qattn] [--jobs 2]
      compiles every kernel of the list (see kernel_list) with `qattn compile --emit cubin --no-cache`
      and writes, per kernel, DIR/<kernel>.code (the cubin's sections, see code_digest) and
      DIR/<kernel>.report (qattn's registers / spills / shared-memory line and notes), plus
      DIR/<kernel>.sass when cuobjdump is installed (readable, for a diff by eye), and DIR/entries.txt
      (which list entry compiled to which kernel). --only REGEX takes the matching entries only.
  scripts/sass_diff.py compare BASE NEW
      exit 0 when both folders hold the same kernels with identical files, else lists the differences
      and exits 1.
  scripts/sass_diff.py list
      prints the kernel list (arch | spec | tiling; an empty tiling is the spec's default).

Run `dump` before a change (into a folder outside the repository), `dump` after it, then `compare`.

The .code file holds every ELF section of the cubin byte for byte (hex), by section name, except the
string and symbol tables. `compare` compares the machine code and what the launch depends on (see
KEPT): the .text sections (SASS is their disassembly, so equal bytes are equal SASS), the kernel's
attributes (.nv.info*: registers, stack, parameters; symbol indices blanked, since they count the
symbols), shared-memory and parameter-bank sizes, plus qattn's registers / spills / shared-memory line.
Left out: the static data NVRTC emits for each static constexpr member (.nv.constant4, .nv.global*,
their relocations) and the symbol-indexed call graph / frame tables: a member added to the kernel
template adds an unreferenced constant there without changing one instruction. cuobjdump -sass, where
installed, is also written (.sass) for reading a difference.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ARCHS = ["sm_80", "sm_89", "sm_90a"]


def default_grid(arch):
    """The prefill int8/int4 points of generator/search_space.cpp's default_grid(arch), as spec text."""
    out = []

    def add(qk, pv, o, d, causal, smooth, accum=None):
        s = f"prefill qk={qk} pv={pv} out={o} d={d}"
        if causal:
            s += " causal"
        if smooth:
            s += f" smooth={smooth}"
        if accum:
            s += f" accum={accum}"
        out.append(s)

    for d in (64, 128):
        for causal in (False, True):
            for qg in ("per_token", "per_block", "per_tensor"):
                for vg in ("per_channel", "per_tensor"):
                    add(f"int8:{qg}", f"int8:{vg}", "fp16", d, causal, "kv" if vg == "per_channel" else "k")
            add("int8:per_token", "int8:per_channel", "bf16", d, causal, "kv")
    for qg in ("per_warp", "per_thread"):
        add(f"int8:{qg}", "int8:per_tensor", "fp16", 128, False, "k")
        add(f"int8:{qg}", "int8:per_channel", "bf16", 128, True, "kv")
    for causal in (False, True):
        add("int4:per_token", "int8:per_channel", "fp16", 128, causal, "kv")
    for d in (96, 256):
        for causal in (False, True):
            add("int8:per_token", "int8:per_channel", "fp16", d, causal, "kv")
            add("int8:per_block" if causal else "int8:per_tensor", "int8:per_tensor", "bf16", d, causal, "k")
    fp8_mma = arch in ("sm_89", "sm_90", "sm_90a")
    for d in (64, 96, 128, 256):
        c = d in (64, 256)
        add("int8:per_token", "fp16", "fp16", d, c, "k")
        add("int8:per_block", "fp16", "bf16", d, not c, "k")
        add("int8:per_token", "fp16", "fp16", d, not c, "k", accum="fp16")
        if not fp8_mma:
            continue
        add("int8:per_token", "fp8e4m3:per_channel", "fp16", d, c, "kv")
        add("int8:per_block", "fp8e4m3:per_channel", "bf16", d, not c, "k")
        add("int8:per_token", "fp8e4m3:per_channel", "fp16", d, c, "k", accum="two_level")
        add("int4:per_warp", "fp8e4m3:per_channel", "fp16", d, not c, "qkv")
    for d in (64, 96, 128, 256):
        for causal in (False, True):
            add("int8:per_token", "int8:per_channel", "fp16", d, causal, "qkv")
            add("int8:per_block", "int8:per_tensor", "bf16", d, causal, "qk")
    for qg in ("per_tensor", "per_warp", "per_thread"):
        add(f"int8:{qg}", "int8:per_tensor", "fp16", 128, qg == "per_warp", "qk")
    return out


# Non-default tilings: the forms the default grid does not pick (fused Q, TMA, packed int4 on sm_90a's
# list of archs where it is not the default, wgmma on other shapes, 8 warps).
EXTRA = [
    ("sm_90a", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv", "bm64_bn128_w4_s3_wg_tma_mb4"),
    ("sm_90a", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=kv", "bm64_bn128_w4_s3_wg_tma_mb4"),
    ("sm_90a", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=kv", "bm64_bn128_w4_s2_wg_tma"),
    ("sm_90a", "prefill qk=int8:per_block pv=fp8e4m3:per_channel out=bf16 d=128 smooth=k", "bm64_bn128_w4_s2_wg_tma"),
    ("sm_90a", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv", "bm64_bn128_w4_s3_wg_qf_mb4"),
    ("sm_90a", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv", "bm64_bn128_w4_s3_wg_qf_tma_mb4"),
    ("sm_90a", "prefill qk=int8:per_warp pv=int8:per_channel out=bf16 d=128 causal smooth=kv", "bm64_bn128_w4_s2_wg_qf"),
    ("sm_90a", "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv", "bm64_bn128_w4_s2_wg"),
    ("sm_90a", "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=256 causal smooth=k accum=two_level", "bm64_bn64_w4_s2_wg"),
    ("sm_90a", "prefill qk=int8:per_block pv=int8:per_tensor out=bf16 d=96 smooth=k", "bm64_bn64_w4_s2_wg"),
    ("sm_90a", "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=64 smooth=k", "bm128_bn64_w8_s2_wg"),
    ("sm_80", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv", "bm128_bn64_w8_s2"),
    ("sm_80", "prefill qk=int8:per_thread pv=int8:per_channel out=fp16 d=128 smooth=kv", "bm128_bn64_w8_s2_qf"),
    ("sm_89", "prefill qk=int8:per_block pv=int8:per_tensor out=fp16 d=96 causal smooth=k", "bm64_bn64_w4_s2_qf"),
    ("sm_80", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv", "bm64_bn128_w4_s3_qf"),
    ("sm_80", "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 smooth=k", "bm64_bn64_w4_s2_i4mma"),
    ("sm_89", "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=64 smooth=kv", "bm64_bn64_w4_s2_i4mma_mb2"),
    ("sm_80", "prefill qk=int4:per_token pv=int8:per_channel out=fp16 d=96 causal smooth=kv", "bm64_bn64_w4_s2_i4mma"),
    ("sm_90a", "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 smooth=k", ""),
    ("sm_90a", "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 smooth=k", "bm64_bn128_w4_s2_wg"),
    ("sm_89", "prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qkv", ""),
]


def kernel_list():
    return [(a, s, "") for a in ARCHS for s in default_grid(a)] + EXTRA


def code_digest(path):
    """The cubin's sections (name, type, flags, size, bytes as hex), string and symbol tables left out."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise SystemExit(f"{path}: not a 64-bit ELF")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx]
    def name(off):
        start = strtab[4] + off
        return data[start:data.index(b"\0", start)].decode()
    lines = []
    for sh_name, sh_type, flags, _addr, off, size, link, info, align, _es in secs:
        n = name(sh_name)
        if sh_type in (2, 3):   # SYMTAB, STRTAB
            continue
        body = b"" if sh_type == 8 else data[off:off + size]   # NOBITS: size only
        lines.append(f"[{n}] type {sh_type:#x} flags {flags:#x} size {size} align {align}")
        for i in range(0, len(body), 32):
            lines.append("  " + body[i:i + 32].hex())
    return "\n".join(lines) + "\n"


def dump_one(qattn, out_dir, arch, spec, tiling, tmp):
    cmd = [qattn, "compile", "--spec", spec, "--arch", arch, "--no-cache", "--emit", "cubin"]
    if tiling:
        cmd += ["--tiling", tiling]
    fd, cubin = tempfile.mkstemp(suffix=".cubin", dir=tmp)
    os.close(fd)
    r = subprocess.run(["nice"] + cmd + ["--out", cubin], capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED {arch} | {spec} | {tiling}: {r.stderr.strip() or r.stdout.strip()}"
    lines = (r.stdout + r.stderr).strip().splitlines()
    line = next(l for l in lines if l.startswith("qattn_"))
    kernel = line.split()[0]
    # registers, spills, shared memory, and the notes (e.g. a serialized wgmma pipeline); the compile
    # time and cubin size vary or are covered by .code
    report = "\n".join([re.sub(r"\s+compiled in.*$", "", line)] + [l for l in lines if l.startswith("note:")])
    with open(os.path.join(out_dir, kernel + ".report"), "w") as f:   # list entries may share a kernel
        f.write(report + "\n")
    with open(os.path.join(out_dir, kernel + ".code"), "w") as f:
        f.write(code_digest(cubin))
    cuobjdump = shutil.which("cuobjdump") or ("/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)
    if cuobjdump:
        sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True).stdout
        with open(os.path.join(out_dir, kernel + ".sass"), "w") as f:
            f.write(sass)
    os.unlink(cubin)
    return f"{arch} | {spec} | {tiling} -> {kernel}"


def dump(args):
    os.makedirs(args.dir, exist_ok=True)
    items = [it for it in kernel_list() if re.search(args.only, " | ".join(it))]
    env_ld = os.environ.get("LD_LIBRARY_PATH", "")
    os.environ["LD_LIBRARY_PATH"] = "/usr/local/cuda/lib64" + (":" + env_ld if env_ld else "")
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        results = list(ex.map(lambda it: dump_one(args.qattn, args.dir, *it, tmp), items))
    errors = [r for r in results if r.startswith("FAILED")]
    with open(os.path.join(args.dir, "entries.txt"), "w") as f:   # which list entry compiled to which kernel
        f.write("".join(r + "\n" for r in results if not r.startswith("FAILED")))
    for e in errors:
        print(e, file=sys.stderr)
    n = len([f for f in os.listdir(args.dir) if f.endswith(".code")])
    print(f"{args.dir}: {n} kernels dumped from {len(items)} list entries, {len(errors)} failed")
    return 1 if errors else 0


KEPT = re.compile(r"^\[(\.text\.|\.nv\.info|\.nv\.shared|\.nv\.constant0|\.nv\.compat|\.note\.nv\.)")


def normalised(path):
    """The sections of a .code file that compare() compares (see the module's comment)."""
    if not path.endswith(".code"):
        return open(path, "rb").read()
    out, keep, name, hexbuf = [], False, "", []

    def flush():
        if keep and name.startswith(".nv.info") and hexbuf:
            # entries: format u8, attribute u8, size u16, payload; these attributes' payloads start with a
            # symbol index (PARAM_CBANK, REGCOUNT, MAX / MIN_STACK_SIZE, FRAME_SIZE)
            b = bytearray(bytes.fromhex("".join(hexbuf)))
            i = 0
            while i + 4 <= len(b):
                size = int.from_bytes(b[i + 2:i + 4], "little") if b[i] == 0x04 else 0
                if b[i] == 0x04 and size == 8 and b[i + 1] in (0x0A, 0x2F, 0x23, 0x12, 0x11):
                    b[i + 4:i + 8] = b"\0\0\0\0"
                i += 4 + size
            out.append(b.hex())
        elif keep:
            out.extend(hexbuf)

    for line in open(path):
        if line.startswith("["):
            flush()
            name, hexbuf = line[1:line.index("]")], []
            keep = bool(KEPT.match(line))
            if keep:
                out.append(line.strip())
        else:
            hexbuf.append(line.strip())
    flush()
    return "\n".join(out).encode()


def compare(args):
    a = sorted(os.listdir(args.base))
    b = sorted(os.listdir(args.new))
    bad = 0
    for f in sorted(set(a) | set(b)):
        pa, pb = os.path.join(args.base, f), os.path.join(args.new, f)
        if not os.path.exists(pa) or not os.path.exists(pb):
            print(f"only in {'base' if os.path.exists(pa) else 'new'}: {f}")
            bad += 1
        elif normalised(pa) != normalised(pb):
            print(f"differs: {f}")
            bad += 1
    kernels = len([f for f in a if f.endswith(".code")])
    print(f"{kernels} kernels in base, {len([f for f in b if f.endswith('.code')])} in new; "
          f"{'all identical' if bad == 0 else str(bad) + ' files differ'}")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("dir")
    d.add_argument("--qattn", default="build/bin/qattn")
    d.add_argument("--jobs", type=int, default=2)
    d.add_argument("--only", default="", help="only the list entries whose 'arch | spec | tiling' text matches this regex")
    c = sub.add_parser("compare")
    c.add_argument("base")
    c.add_argument("new")
    sub.add_parser("list")
    args = p.parse_args()
    if args.cmd == "dump":
        return dump(args)
    if args.cmd == "compare":
        return compare(args)
    for it in kernel_list():
        print(" | ".join(it))
    return 0


if __name__ == "__main__":
    sys.exit(main())
