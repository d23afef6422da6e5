#!/usr/bin/env python3
"""What a prefill kernel executes once per CTA, and where, from two Nsight Compute source-counter exports.

Run the same kernel at two lengths with the same number of CTAs (e.g. d 64 at N 4k, b 4 and N 16k, b 1:
8192 CTAs of 32 and of 128 KV tiles), each exported with
  ncu -k regex:qattn_prefill --launch-skip 3 --launch-count 1 --section SourceCounters \
      --page source --csv --print-source sass <program> > run.csv
Instructions that run once per KV tile execute `ratio` (= long tiles / short tiles) times as often in the
long run; what the short run executes beyond (long / ratio) is per-CTA work (prologue, epilogue) or work
that a CTA's first tiles do more often (R raises). Prints the total per CTA and the largest contiguous
SASS regions of it.

  python3 bench/ncu_per_cta.py short.csv long.csv --ctas 8192 --ratio 4 [--tiles 32]
"""
import argparse
import csv
import gzip
import re


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    reader = csv.reader(lines[start:])
    header = next(reader)
    src, executed = header.index("Source"), header.index("Instructions Executed")
    rows = []
    for row in reader:
        if len(row) > executed and row[executed].isdigit():
            rows.append((row[src].strip(), int(row[executed])))
    return rows


def same_kernel(short, long_):
    strip = lambda text: re.sub(r"0x[0-9a-f]+", "", text)   # branch targets hold load addresses
    return len(short) == len(long_) and all(strip(s[0]) == strip(l[0]) for s, l in zip(short, long_))


def analyse(short, long_, ctas, ratio):
    """(warp instructions per CTA beyond the long run's per-tile share, regions [(first, last, per CTA)])."""
    excess = [s[1] - l[1] / ratio for s, l in zip(short, long_)]
    regions, cur = [], None
    for i, x in enumerate(excess):
        if x > 0.25 * ctas:   # a quarter of an execution per CTA
            if cur and i == cur[1] + 1:
                cur[1], cur[2] = i, cur[2] + x
            else:
                if cur:
                    regions.append(cur)
                cur = [i, i, x]
    if cur:
        regions.append(cur)
    regions = [(first, last, x / ctas) for first, last, x in sorted(regions, key=lambda r: -r[2])]
    return sum(excess) / ctas, regions


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("short")
    p.add_argument("long")
    p.add_argument("--ctas", type=int, required=True, help="CTAs of each launch (the same in both)")
    p.add_argument("--ratio", type=float, required=True, help="KV tiles per CTA, long run / short run")
    p.add_argument("--tiles", type=int, default=0, help="KV tiles per CTA in the short run (to print tiles' worth)")
    p.add_argument("--regions", type=int, default=8)
    a = p.parse_args()
    short, long_ = load(a.short), load(a.long)
    if not same_kernel(short, long_):
        raise SystemExit("ncu_per_cta: the two exports are not the same kernel (their SASS differs)")
    per_cta, regions = analyse(short, long_, a.ctas, a.ratio)
    per_tile = (sum(l[1] for l in long_) / a.ratio) / a.ctas / max(a.tiles, 1)
    print(f"warp instructions per CTA: short run {sum(s[1] for s in short) / a.ctas:.0f}, of which beyond the "
          f"long run's per-tile share {per_cta:.0f}" + (f" ({per_cta / per_tile:.2f} tiles' worth)" if a.tiles else ""))
    for first, last, x in regions[: a.regions]:
        print(f"  SASS {first:5d}-{last:5d}: {x:6.0f} per CTA, runs {short[first][1] / a.ctas:5.1f}x per CTA (long run "
              f"{long_[first][1] / a.ctas:5.1f}x)  {short[first][0][:48]}")


if __name__ == "__main__":
    main()
