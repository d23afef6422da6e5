#!/usr/bin/env python3
"""Condenses bench_prefill.py result files (--grid formats) into a summary: per shape, cuDNN's
TFLOPS, every qattn format's kernel-only ratio to cuDNN and to flash, its quantization overhead and its
cosine similarity. Reads only the JSON files it is given; prints Markdown.

    python3 bench/summarize_formats.py <out>/prefill_formats_d*_h100_<date>.json
"""
import json
import sys

FORMATS = ["qattn_int8_per_token", "qattn_int8_fp8", "qattn_int8_fp8_2lvl", "qattn_int8_fp16",
           "qattn_int8_fp16_acc16", "qattn_int4_fp8", "qattn_int8_fp8_rot", "qattn_int4_fp8_rot", "qattn_fp16"]


def load_rows(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)["rows"]
    return rows


def cell(kernel, e2e):
    if not kernel:
        return "–"   # not run
    if kernel.get("error") or not kernel.get("time_ms"):
        return "failed"
    cos = (kernel.get("accuracy") or {}).get("cosine")
    over = e2e.get("quant_overhead") if e2e else None
    text = f"{kernel['ratio_cudnn']:.2f}× / {kernel['ratio_flash']:.2f}×"
    if over is not None:
        text += f", q {100 * over:+.0f}%"
    if cos is not None:
        text += f", cos {cos:.4f}"
    return text


def summarize(rows):
    shapes = sorted({(r["d"], r["n"], r["causal"]) for r in rows})
    by = {(r["d"], r["n"], r["causal"], r["variant"], r["mode"]): r for r in rows}
    head = ["d", "N", "causal", "cuDNN TFLOPS"] + [f.replace("qattn_", "") for f in FORMATS]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for d, n, c in shapes:
        cudnn = by.get((d, n, c, "sdpa_cudnn", "sdpa"), {})
        cells = [str(d), str(n), "yes" if c else "no", f"{cudnn.get('tflops') or 0:.0f}"]
        cells += [cell(by.get((d, n, c, f, "kernel")), by.get((d, n, c, f, "e2e"))) for f in FORMATS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print("Each cell: kernel-only time ratio vs cuDNN / vs flash (> 1: faster), quantization overhead of the "
          "end-to-end call (q), cosine similarity vs the fp64 reference.\n")
    print(summarize(load_rows(argv)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
