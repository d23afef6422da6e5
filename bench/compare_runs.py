"""Compare two prefill benchmark runs of the same grid (bench_prefill.py JSON), variant by variant:
kernel-only and end-to-end time of B against A, and B's end-to-end overhead over A's kernel. Used for
A/B runs of one build, e.g. QATTN_FUSE_Q=0 (A: Q quantization pass) against the default (B: fused Q).
    python3 bench/compare_runs.py A.json B.json [--variants qattn_int8_fp8,qattn_int8_per_token]
"""
import argparse
import json


def load(path):
    data = json.load(open(path))
    rows = data["rows"] if isinstance(data, dict) else data
    return {(r["d"], r["n"], r["causal"], r["variant"], r["mode"]): r for r in rows}


def compare(a, b, variants):
    lines = []
    for key in sorted(a):
        d, n, causal, variant, mode = key
        if mode != "e2e" or variant not in variants or key not in b:
            continue
        k0, k1 = a[(d, n, causal, variant, "kernel")]["time_ms"], b[(d, n, causal, variant, "kernel")]["time_ms"]
        e0, e1 = a[key]["time_ms"], b[key]["time_ms"]
        lines.append(f"{variant:22s} d={d:3d} N={n:6d} causal={int(causal)} kernel {k0 * 1e3:8.1f} -> {k1 * 1e3:8.1f} us "
                     f"({(k1 / k0 - 1) * 100:+.1f}%)  e2e {e0 * 1e3:8.1f} -> {e1 * 1e3:8.1f} us ({(e1 / e0 - 1) * 100:+.1f}%)  "
                     f"overhead over A's kernel {100 * (e0 / k0 - 1):.1f}% -> {100 * (e1 / k0 - 1):.1f}%")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--variants", default="qattn_int8_fp8,qattn_int8_per_token")
    args = p.parse_args()
    print("\n".join(compare(load(args.a), load(args.b), args.variants.split(","))))


if __name__ == "__main__":
    main()
