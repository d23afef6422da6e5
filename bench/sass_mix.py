#!/usr/bin/env python3
"""SASS instruction mix of qattn kernels: the matrix instructions (IMMA / HMMA / QMMA, and the wgmma forms
IGMMA / HGMMA / QGMMA) of the whole kernel and of its main loop, from `cuobjdump -sass`.

    python3 bench/sass_mix.py --qattn build/bin/qattn --arch sm_90a --out bench/results/sass.md \\
        "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128" ...

Each spec is compiled with `qattn compile --emit cubin` (its default tiling, or --tiling) and
disassembled. The main loop is the largest backward branch's range (target .. branch) that holds a matrix
instruction: the KV-tile loop of a prefill kernel. No GPU is needed, only cuobjdump (CUDA toolkit).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

# "/*0a30*/   @!P0 IMMA.16832.S8.S8 R24, ..." -> (0x0a30, "IMMA.16832.S8.S8", operands)
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_BRANCH_TARGET = re.compile(r"(?:0x)([0-9a-f]+)")


def matrix_family(opcode):
    """'IMMA.16832.S8.S8' -> 'IMMA'; None for instructions that are not matrix multiplies."""
    head = opcode.split(".")[0]
    return head if head.endswith("MMA") else None


def parse_sass(text):
    """[(address, opcode, operands)] of every instruction, in address order, per kernel function."""
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in _INSTR.finditer(text)]


def main_loop(instrs):
    """(start, end) addresses of the largest backward-branch range holding a matrix instruction, or None."""
    best = None
    for addr, op, operands in instrs:
        if not op.startswith("BRA"):
            continue
        m = _BRANCH_TARGET.search(operands)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        if not any(target <= a <= addr and matrix_family(o) for a, o, _ in instrs):
            continue
        if best is None or addr - target > best[1] - best[0]:
            best = (target, addr)
    return best


def count_mix(instrs, lo=None, hi=None):
    counts = collections.Counter()
    for addr, op, _ in instrs:
        if (lo is None or addr >= lo) and (hi is None or addr <= hi):
            family = matrix_family(op)
            if family:
                counts[op] += 1
    return counts


def summarize(sass_text):
    instrs = parse_sass(sass_text)
    loop = main_loop(instrs)
    return {
        "instructions": len(instrs),
        "kernel": dict(count_mix(instrs)),
        "loop": dict(count_mix(instrs, *loop)) if loop else {},
        "loop_instructions": sum(1 for a, _, _ in instrs if loop and loop[0] <= a <= loop[1]),
    }


def by_family(counts):
    fam = collections.Counter()
    for op, n in counts.items():
        fam[matrix_family(op)] += n
    return fam


def render(rows):
    lines = ["| kernel | matrix instructions (whole kernel) | main loop: matrix / all instructions |",
             "|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| `{r['spec']}` | failed: {r['error']} | – |")
            continue
        whole = ", ".join(f"{op} ×{n}" for op, n in sorted(r["kernel"].items()))
        fam = by_family(r["loop"])
        loop = ", ".join(f"{f} ×{n}" for f, n in sorted(fam.items()))
        lines.append(f"| `{r['name']}` | {whole or 'none'} | {loop or 'none'} / {r['loop_instructions']} |")
    return "\n".join(lines) + "\n"


def compile_and_disassemble(qattn, cuobjdump, spec, arch, tiling, workdir):
    cubin = os.path.join(workdir, "k.cubin")
    cmd = [qattn, "compile", "--spec", spec, "--arch", arch, "--emit", "cubin", "--out", cubin, "--no-cache"]
    if tiling:
        cmd += ["--tiling", tiling]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    name = out.stdout.split()[0] if out.stdout.split() else spec
    sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, timeout=600)
    if sass.returncode != 0:
        raise RuntimeError(sass.stderr.strip())
    return name, sass.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="+", help="spec texts")
    p.add_argument("--qattn", default="build/bin/qattn", help="the qattn CLI")
    p.add_argument("--cuobjdump", default=None, help="default: on PATH, else /usr/local/cuda/bin/cuobjdump")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--tiling", default=None, help="one tiling for every spec (default: each spec's default)")
    p.add_argument("--out", default=None, help="Markdown file to write (default: stdout only)")
    args = p.parse_args(argv)
    cuobjdump = args.cuobjdump or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(cuobjdump):
        print(f"sass_mix: no cuobjdump at {cuobjdump}; give --cuobjdump PATH", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for spec in args.specs:
            try:
                name, sass = compile_and_disassemble(args.qattn, cuobjdump, spec, args.arch, args.tiling, work)
                rows.append({"spec": spec, "name": name, **summarize(sass)})
            except (RuntimeError, subprocess.SubprocessError) as e:
                rows.append({"spec": spec, "error": " ".join(str(e).split())[:200]})
    text = render(rows)
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# SASS matrix-instruction mix ({args.arch})\n\nCommand: `{' '.join(sys.argv)}`\n\n" + text)
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
