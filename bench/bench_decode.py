#!/usr/bin/env python3
"""Decode attention benchmark: qattn decode over BF16, INT8 and INT4 KV caches against PyTorch SDPA BF16
(flash and cuDNN backends), same shapes, one run. Writes decode_<device>_<date>.json and .md.

    python3 bench/bench_decode.py [--quick] [--bin build/bin/qattn_bench_decode] [--dry-run]

Shapes: batch 1/8/64 x KV length 4k/32k/128k, 32 query heads over 8 KV heads, d = 128, one new token.
Each timed call is one decode step on a cold L2 (see bench/README.md, "Decode benchmark"). The run also
times a device-to-device copy of COPY_MB (read + write bytes / time): each row's share of that bandwidth
is how close it runs to the memory roofline of the card it ran on.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_utils as bu  # noqa: E402
from bench_prefill import environment  # noqa: E402  (stdlib only; no torch at import)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = os.path.join(REPO, "build", "bin", "qattn_bench_decode")

HEADS_Q, HEADS_KV, HEAD_DIM, Q_LEN = 32, 8, 128, 1
BATCHES = (1, 8, 64)
KV_LENS = (4096, 32768, 131072)
QUICK_BATCHES, QUICK_KV_LENS = (8,), (131072, 4096)
PAGE_SIZE = 16
FLUSH_MB = 256          # L2 flush before every timed call (H100 L2: 50 MB), the same in both programs
MEMORY_MARGIN = 2 << 30  # kept free for the CUDA context, cuDNN workspaces and the allocator

# Variants in table order. sdpa: PyTorch backend name; qattn: spec text, --paged page size (0: contiguous)
# and the batches it runs at (None: all).
SDPA_VARIANTS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}
_DECODE = "decode qk={fmt} pv={fmt} out=bf16 d=128 gqa=4"
QATTN_VARIANTS = {
    "qattn_bf16": (_DECODE.format(fmt="bf16"), 0, None),
    "qattn_int8": (_DECODE.format(fmt="int8:per_token"), 0, None),
    "qattn_int4_token": (_DECODE.format(fmt="int4:per_token"), 0, None),
    "qattn_int4_group": (_DECODE.format(fmt="int4:per_group"), 0, None),
    "qattn_int4_token_paged": (_DECODE.format(fmt="int4:per_token") + " paged", PAGE_SIZE, (8,)),
    "qattn_fp8": (_DECODE.format(fmt="fp8e4m3:per_head"), 0, None),
    "qattn_flashq": (_DECODE.format(fmt="flashq:per_channel"), 0, None),
    "qattn_int4_token_gemv": (_DECODE.format(fmt="int4:per_token") + " flow=gemv", 0, None),
    "qattn_int8_gemv": (_DECODE.format(fmt="int8:per_token") + " flow=gemv", 0, None),
}
ALL_VARIANTS = list(SDPA_VARIANTS) + list(QATTN_VARIANTS)

# Issue 4, item 7: speed-up over the BF16 flash baseline at batch 8, KV 128k.
TARGET_POINT = (8, 131072)
TARGETS = (("qattn_int4_token", 2.5), ("qattn_int4_group", 2.5), ("qattn_int8", 1.6))
# Issue 26, item 5: bytes read / time >= this share of the device's measured copy bandwidth, same point.
ROOFLINE_TARGETS = (("qattn_int8", 0.8), ("qattn_fp8", 0.8), ("qattn_int4_token", 0.8))
COPY_MB = 2048          # the copy that measures the bandwidth: far beyond any L2

# Bytes of one cache row (token, KV head) per variant; the qattn binary reports its own (kv_row_bytes)
# and this table is only the dry run's estimate (templates/qattn/decode/kv_layout.h).
ROW_BYTES = {"bf16": 2 * HEAD_DIM, "int8:per_token": 4 + HEAD_DIM, "int4:per_token": 4 + HEAD_DIM // 2,
             "int4:per_group": 16 + HEAD_DIM // 2, "fp8e4m3:per_head": HEAD_DIM,
             # flashq: half the heads at 4 bits, half at 2, plus (16 + 2d) bytes per 64-token block
             "flashq:per_channel": (HEAD_DIM // 2 + HEAD_DIM // 4) / 2 + (16 + 2 * HEAD_DIM) / 64}


# ---------------------------------------------------------------- plan (pure Python, no torch)

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="batch 8 only, KV 131072 and 4096")
    p.add_argument("--batch", default=None, help="batches to keep, e.g. 8 or 1,64")
    p.add_argument("--kv", default=None, help="KV lengths to keep, e.g. 131072")
    p.add_argument("--variants", default=",".join(ALL_VARIANTS), help="comma list from: " + ", ".join(ALL_VARIANTS))
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"), help="folder of the result files")
    p.add_argument("--bin", default=DEFAULT_BIN, help="the qattn_bench_decode binary")
    p.add_argument("--cache", default=None, help="qattn SQLite cache passed to the binary (default: its own)")
    p.add_argument("--iters", type=int, default=50, help="timed calls per row (>= 10)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first")
    p.add_argument("--flush-mb", type=int, default=FLUSH_MB, help="L2 flush before each timed call (0: none)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per qattn_bench_decode run")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dry-run", action="store_true", help="print the planned rows and commands; needs no torch or GPU")
    args = p.parse_args(argv)
    try:
        chosen = bu.parse_list(args.variants, ALL_VARIANTS, "variant")
        args.variant_list = [v for v in ALL_VARIANTS if v in chosen]   # table order, whatever the flag's
        batches = QUICK_BATCHES if args.quick else BATCHES
        kv_lens = QUICK_KV_LENS if args.quick else KV_LENS
        args.batches = bu.parse_list(args.batch, batches, "batch", int) if args.batch else list(batches)
        args.kv_lens = bu.parse_list(args.kv, kv_lens, "KV length", int) if args.kv else list(kv_lens)
    except ValueError as e:
        p.error(str(e))
    if args.iters < 10 or args.warmup < 1 or args.flush_mb < 0:
        p.error("need --iters >= 10, --warmup >= 1 and --flush-mb >= 0")
    return args


def points(args):
    """(batch, kv) pairs in run order."""
    return [(b, kv) for b in args.batches for kv in args.kv_lens]


def variants_at(args, batch):
    """The requested variants that run at this batch."""
    def runs_here(v):
        if v in SDPA_VARIANTS:
            return True
        only = QATTN_VARIANTS[v][2]
        return only is None or batch in only
    return [v for v in args.variant_list if runs_here(v)]


def shape_text(batch, kv):
    return f"b={batch},hq={HEADS_Q},hkv={HEADS_KV},q={Q_LEN},kv={kv}"


def qo_bytes(batch):
    """q and o of one call: [batch, 32, 1, 128] 16-bit each."""
    return 2 * batch * HEADS_Q * Q_LEN * HEAD_DIM * 2


def cache_bytes(batch, kv, row_bytes, heads=HEADS_KV):
    """K and V bytes a decode step reads: every row of every sequence once."""
    return 2 * batch * heads * kv * row_bytes


def sdpa_bytes(batch, kv, expanded):
    """Bytes SDPA reads: the BF16 K/V (with 32 heads when GQA had to be expanded) plus q and o."""
    return cache_bytes(batch, kv, 2 * HEAD_DIM, HEADS_Q if expanded else HEADS_KV) + qo_bytes(batch)


def spec_row_bytes(spec):
    fmt = spec.split("qk=")[1].split()[0]
    return ROW_BYTES[fmt]


def qattn_command(args, variant, batch, kv):
    spec, page_size, _ = QATTN_VARIANTS[variant]
    cmd = [args.bin, "--spec", spec, "--shape", shape_text(batch, kv), "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--flush-mb", str(args.flush_mb), "--seed", str(args.seed)]
    if page_size:
        cmd += ["--paged", str(page_size)]
    if args.cache:
        cmd += ["--cache", args.cache]
    return cmd


def row_base(batch, kv, variant):
    kind = "sdpa" if variant in SDPA_VARIANTS else "qattn"
    return {"batch": batch, "kv": kv, "heads_q": HEADS_Q, "heads_kv": HEADS_KV, "d": HEAD_DIM, "q_len": Q_LEN,
            "variant": variant, "kind": kind,
            "spec": QATTN_VARIANTS[variant][0] if kind == "qattn" else None,
            "backend": SDPA_VARIANTS.get(variant), "paged": QATTN_VARIANTS[variant][1] if kind == "qattn" else 0,
            "median_us": None, "p10_us": None, "p90_us": None, "bytes_read": None, "gbps": None,
            "ratio_flash": None, "ratio_cudnn": None, "of_copy": None, "gqa_expanded": False, "non_finite": None,
            "skipped": None, "error": None}


def dry_run(args):
    print(f"bench_decode (dry run): {len(points(args))} points; results would go to {args.out}")
    for batch, kv in points(args):
        print(f"\n[b={batch} kv={kv}]  shape {shape_text(batch, kv)}")
        for variant in variants_at(args, batch):
            if variant in SDPA_VARIANTS:
                need = sdpa_bytes(batch, kv, False)
                print(f"  {variant:24s} torch SDPA {SDPA_VARIANTS[variant]} bf16, enable_gqa=True; reads "
                      f"{need / 1e9:.3f} GB (4x K/V if the backend needs GQA expanded: "
                      f"{sdpa_bytes(batch, kv, True) / 1e9:.3f} GB)")
            else:
                spec = QATTN_VARIANTS[variant][0]
                read = cache_bytes(batch, kv, spec_row_bytes(spec)) + qo_bytes(batch)
                print(f"  {variant:24s} reads {read / 1e9:.3f} GB: {bu.shell_command(qattn_command(args, variant, batch, kv))}")
    point = f"batch {TARGET_POINT[0]}, kv {TARGET_POINT[1]}"
    print("\ntargets at " + point + ": " + ", ".join(f"{v} >= {t}x sdpa_flash" for v, t in TARGETS) + "; "
          + ", ".join(f"{v} >= {t:.0%} of the copy bandwidth" for v, t in ROOFLINE_TARGETS))
    return 0


# ---------------------------------------------------------------- results (pure Python)

def add_speed(row, median_us, p10_us, p90_us, bytes_read):
    row.update(median_us=median_us, p10_us=p10_us, p90_us=p90_us, bytes_read=bytes_read,
               gbps=bytes_read / (median_us * 1e-6) / 1e9 if median_us else None)


def percentile(values, fraction):
    ordered = sorted(values)
    pos = fraction * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])


def add_ratios(rows):
    """Baseline time / row time against both SDPA backends at the same (batch, kv); > 1: faster."""
    base = {(r["batch"], r["kv"], r["variant"]): r["median_us"] for r in rows
            if r["variant"] in SDPA_VARIANTS and r["median_us"]}
    for r in rows:
        for key, variant in (("ratio_flash", "sdpa_flash"), ("ratio_cudnn", "sdpa_cudnn")):
            b = base.get((r["batch"], r["kv"], variant))
            r[key] = b / r["median_us"] if b and r["median_us"] else None
    return rows


def add_copy_shares(rows, copy_gbps):
    """Each row's GB/s as a share of the measured copy bandwidth (None without either)."""
    for r in rows:
        r["of_copy"] = r["gbps"] / copy_gbps if r["gbps"] and copy_gbps else None
    return rows


def find_row(rows, batch, kv, variant):
    return next((r for r in rows if (r["batch"], r["kv"], r["variant"]) == (batch, kv, variant)), None)


def evaluate_targets(rows, copy_gbps=None):
    """One line per target: PASS / MISS with the numbers, or N/A with the reason."""
    batch, kv = TARGET_POINT
    flash = find_row(rows, batch, kv, "sdpa_flash")
    lines = []
    for variant, goal in TARGETS:
        row = find_row(rows, batch, kv, variant)
        head = f"{variant} >= {goal}x sdpa_flash at batch {batch}, kv {kv}"
        if flash is None or not flash["median_us"]:
            why = "not run" if flash is None else bu.one_line(flash["error"] or flash["skipped"] or "no time", 120)
            lines.append(f"N/A  {head}: no sdpa_flash time ({why})")
        elif row is None or not row["median_us"]:
            why = "not run" if row is None else bu.one_line(row["error"] or row["skipped"] or "no time", 120)
            lines.append(f"N/A  {head}: no {variant} time ({why})")
        else:
            ratio = flash["median_us"] / row["median_us"]
            verdict = "PASS" if ratio >= goal and not row["non_finite"] else "MISS"
            note = " (output had non-finite values)" if row["non_finite"] else ""
            if flash["gqa_expanded"]:
                note += " (flash baseline read GQA-expanded K/V: 4x the bytes)"
            lines.append(f"{verdict} {head}: {ratio:.2f}x ({row['median_us']:.1f} us vs {flash['median_us']:.1f} us)"
                         + note)
    return lines + evaluate_roofline(rows, copy_gbps)


def evaluate_roofline(rows, copy_gbps):
    """One line per ROOFLINE_TARGETS entry: PASS / MISS with the share, or N/A with the reason."""
    batch, kv = TARGET_POINT
    lines = []
    for variant, goal in ROOFLINE_TARGETS:
        row = find_row(rows, batch, kv, variant)
        head = f"{variant} >= {goal:.0%} of the copy bandwidth at batch {batch}, kv {kv}"
        if not copy_gbps:
            lines.append(f"N/A  {head}: no copy bandwidth measured")
        elif row is None or not row["gbps"]:
            why = "not run" if row is None else bu.one_line(row["error"] or row["skipped"] or "no time", 120)
            lines.append(f"N/A  {head}: no {variant} time ({why})")
        else:
            share = row["gbps"] / copy_gbps
            verdict = "PASS" if share >= goal and not row["non_finite"] else "MISS"
            lines.append(f"{verdict} {head}: {share:.0%} ({row['gbps']:.0f} of {copy_gbps:.0f} GB/s, "
                         f"{row['median_us']:.1f} us)")
    return lines


def _cell(value, spec):
    return "–" if value is None else format(value, spec)


def row_note(r):
    notes = []
    if r["skipped"]:
        notes.append("skipped: " + bu.one_line(r["skipped"], 100))
    if r["error"]:
        notes.append("failed: " + bu.one_line(r["error"], 100))
    if r["gqa_expanded"]:
        notes.append("GQA expanded (4x K/V bytes)")
    if r["non_finite"] and not r["error"]:
        notes.append(f"{r['non_finite']} non-finite outputs")
    if r.get("splits"):
        notes.append(f"splits {r['splits']}")
    return "; ".join(notes).replace("|", "/")


MD_COLUMNS = ["kv", "variant", "median µs", "p10–p90 µs", "GB/s", "of copy", "vs flash", "vs cuDNN", "notes"]


def markdown_row(r):
    spread = "–" if r["p10_us"] is None else f"{r['p10_us']:.1f}–{r['p90_us']:.1f}"
    ratio = lambda x: "–" if x is None else f"{x:.2f}×"  # noqa: E731
    share = "–" if r.get("of_copy") is None else f"{r['of_copy']:.0%}"
    cells = [str(r["kv"]), r["variant"], _cell(r["median_us"], ".1f"), spread, _cell(r["gbps"], ".0f"), share,
             ratio(r["ratio_flash"]), ratio(r["ratio_cudnn"]), row_note(r)]
    return "| " + " | ".join(cells) + " |"


def render_markdown(meta, rows):
    lines = [f"# Decode attention on {meta.get('device', '?')} ({meta.get('date', '?')})", ""]
    for key in ("device", "driver", "torch", "cuda", "cudnn", "commit", "command", "bin"):
        if meta.get(key) is not None:
            value = f"`{meta[key]}`" if key in ("command", "commit", "bin") else str(meta[key])
            lines.append(f"- {key}: {value}")
    if not meta.get("complete", True):
        lines.append("- **incomplete run**: the points below are those finished before it stopped")
    lines += ["", f"{HEADS_Q} query heads over {HEADS_KV} KV heads, d = {HEAD_DIM}, {Q_LEN} new token per sequence, "
              f"every sequence holding kv tokens. Median of {meta.get('iters', '?')} calls, each timed alone with "
              f"CUDA events after a {meta.get('flush_mb', '?')} MB L2 flush. GB/s = bytes read / median, with bytes "
              f"read = K + V cache rows (batch·heads_kv·kv·row_bytes·2) + q + o. 'vs' = baseline time / this time "
              f"(> 1: faster). 'of copy' = GB/s / the copy bandwidth measured in this run "
              f"({_cell(meta.get('copy_gbps'), '.0f')} GB/s: a {COPY_MB} MB device-to-device copy, read + write "
              f"bytes / median time).", ""]
    for batch in sorted({r["batch"] for r in rows}):
        lines += [f"## batch {batch}", "", "| " + " | ".join(MD_COLUMNS) + " |",
                  "|" + "|".join("---" for _ in MD_COLUMNS) + "|"]
        lines += [markdown_row(r) for r in rows if r["batch"] == batch]
        lines.append("")
    lines += ["## targets", ""] + [f"- {t}" for t in evaluate_targets(rows, meta.get("copy_gbps"))]
    return "\n".join(lines) + "\n"


def write_results(json_path, md_path, meta, rows):
    bu.write_json(json_path, meta, rows)
    tmp = md_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(render_markdown(meta, rows))
    os.replace(tmp, md_path)


# ---------------------------------------------------------------- qattn (subprocess of the binary)

def parse_binary_output(stdout):
    """The binary's one JSON line (the last line that parses as a JSON object), or None."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def fill_qattn_row(row, rc, stdout, stderr):
    """The row from the binary's exit status and output; a failure becomes the row's error."""
    result = parse_binary_output(stdout)
    if result is not None:
        add_speed(row, result["median_us"], result["p10_us"], result["p90_us"], result["bytes_read"])
        for key in ("splits", "kv_row_bytes", "non_finite", "first_call_s", "fill_s", "enqueue_us_per_iter",
                    "times_us", "device"):
            row[key] = result.get(key)
        if result.get("non_finite"):
            row["error"] = f"{result['non_finite']} non-finite output values"
    if rc != 0 and not row["error"]:
        tail = bu.one_line(stderr.strip().splitlines()[-1] if stderr.strip() else "(no message)", 300)
        row["error"] = f"qattn_bench_decode exited {rc}: {tail}"
    return row


def bench_qattn(args, variant, batch, kv):
    row = row_base(batch, kv, variant)
    cmd = qattn_command(args, variant, batch, kv)
    row["command"] = bu.shell_command(cmd)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        fill_qattn_row(row, done.returncode, done.stdout, done.stderr)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-2000:])
    except subprocess.TimeoutExpired:
        row["error"] = f"qattn_bench_decode ran past --timeout {args.timeout} s"
    except OSError as e:
        row["error"] = f"cannot run {args.bin}: {e}"
    return row


# ---------------------------------------------------------------- torch SDPA

def make_sdpa_inputs(torch, batch, kv, seed):
    """q [b, 32, 1, 128], k/v [b, 8, kv, 128] BF16: N(0, 1), with 4 K channels per head offset by
    +-5..20 (the K outliers real models have; qattn's caches are filled the same way)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    dev, bf16 = "cuda", torch.bfloat16
    q = torch.randn((batch, HEADS_Q, Q_LEN, HEAD_DIM), generator=gen, device=dev, dtype=bf16)
    k = torch.randn((batch, HEADS_KV, kv, HEAD_DIM), generator=gen, device=dev, dtype=bf16)
    v = torch.randn((batch, HEADS_KV, kv, HEAD_DIM), generator=gen, device=dev, dtype=bf16)
    for h in range(HEADS_KV):
        channels = torch.randperm(HEAD_DIM, generator=gen, device=dev)[:4]
        offsets = 5.0 + 15.0 * torch.rand(4, generator=gen, device=dev)
        signs = torch.randint(0, 2, (4,), generator=gen, device=dev) * 2 - 1
        k[:, h, :, channels] += (offsets * signs).to(bf16)
    return q, k, v


def sdpa_runner(torch, backend_name, q, k, v, enable_gqa):
    """A no-argument call of SDPA on one backend only (sdpa_kernel raises instead of falling back)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    kwargs = {"enable_gqa": True} if enable_gqa else {}

    def call():
        with sdpa_kernel([backend]):
            return sdpa(q, k, v, **kwargs)
    return call


def try_call(call):
    """(output, None) or (None, error text with the backend's own reasons from its warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return call(), None
        except (RuntimeError, TypeError, ValueError) as e:
            reasons = " / ".join(str(w.message) for w in caught)
            return None, f"{type(e).__name__}: {e}" + (f" [{reasons}]" if reasons else "")


def queue_ahead(torch, ms):
    """Keeps the GPU busy for about `ms` before the first timed call: a head start for the host, in case
    one Python iteration takes longer than the flush in front of each call."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * 2.0e6))   # cycles at ~2 GHz; a slower clock only waits longer


def time_cuda(torch, call, iters, warmup, flush):
    """Per-call GPU times (us): each call alone between two events, after an L2 flush that also keeps
    the GPU busy while Python enqueues the call (so launch gaps stay out of the events)."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    queue_ahead(torch, 20.0)
    for i in range(iters):
        if flush is not None:
            flush.zero_()
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize()
    return [1000.0 * s.elapsed_time(e) for s, e in zip(starts, ends)]


def free_bytes(torch):
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def measure_copy_gbps(torch, args):
    """The device's copy bandwidth: (read + write bytes) / median time of a COPY_MB copy (random bytes)."""
    src = torch.randint(0, 256, (COPY_MB << 20,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = time_cuda(torch, lambda: dst.copy_(src), args.iters, args.warmup, None)
    gbps = 2 * src.numel() / (percentile(times, 0.5) * 1e-6) / 1e9
    del src, dst
    torch.cuda.empty_cache()
    return gbps


def bench_sdpa_point(torch, args, batch, kv, variants):
    """Rows of the SDPA variants at one point, on one set of inputs (freed before returning)."""
    rows = [row_base(batch, kv, v) for v in variants]
    need, free = sdpa_bytes(batch, kv, False) + (args.flush_mb << 20) + MEMORY_MARGIN, free_bytes(torch)
    if need > free:
        for r in rows:
            r["skipped"] = f"needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return rows
    q, k, v = make_sdpa_inputs(torch, batch, kv, args.seed + batch * 7 + kv)
    flush = torch.empty(args.flush_mb << 18, dtype=torch.float32, device="cuda") if args.flush_mb else None
    for row in rows:
        try:
            bench_sdpa_backend(torch, args, row, q, k, v, flush)
        except Exception as e:  # noqa: BLE001 — a failed backend is a result, not the end of the run
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc(limit=2)
        torch.cuda.empty_cache()
    del q, k, v, flush
    torch.cuda.empty_cache()
    return rows


def bench_sdpa_backend(torch, args, row, q, k, v, flush):
    backend = row["backend"]
    call = sdpa_runner(torch, backend, q, k, v, enable_gqa=True)
    out, error = try_call(call)
    expanded = None
    if out is None:
        # The backend refused GQA (or this torch has no enable_gqa): K/V with 32 heads instead. Only the
        # attention call is timed, but it then reads 4x the K/V bytes; the row says so.
        extra = 2 * k.numel() * k.element_size() * (HEADS_Q // HEADS_KV)
        if extra + MEMORY_MARGIN > free_bytes(torch):
            row["skipped"] = (f"backend refused GQA ({bu.one_line(error, 200)}) and the expanded K/V "
                              f"({extra / 2**30:.1f} GiB) does not fit")
            return
        expanded = (k.repeat_interleave(HEADS_Q // HEADS_KV, dim=1), v.repeat_interleave(HEADS_Q // HEADS_KV, dim=1))
        call = sdpa_runner(torch, backend, q, *expanded, enable_gqa=False)
        out, error2 = try_call(call)
        if out is None:
            row["error"] = f"with enable_gqa: {error}; with expanded K/V: {error2}"
            return
        row["gqa_expanded"] = True
        row["gqa_error"] = error
    row["non_finite"] = int((~torch.isfinite(out)).sum())
    times = time_cuda(torch, call, args.iters, args.warmup, flush)
    add_speed(row, percentile(times, 0.5), percentile(times, 0.1), percentile(times, 0.9),
              sdpa_bytes(row["batch"], row["kv"], row["gqa_expanded"]))
    row["times_us"] = [round(t, 3) for t in times]
    if row["non_finite"]:
        row["error"] = f"{row['non_finite']} non-finite output values"
    del expanded, out


# ---------------------------------------------------------------- main

def metadata(args, torch):
    return {
        **environment(torch),
        "bin": args.bin,
        "iters": args.iters, "warmup": args.warmup, "flush_mb": args.flush_mb, "seed": args.seed,
        "heads_q": HEADS_Q, "heads_kv": HEADS_KV, "d": HEAD_DIM, "q_len": Q_LEN,
        "complete": False,
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        return dry_run(args)
    wants_qattn = any(v in QATTN_VARIANTS for v in args.variant_list)
    if wants_qattn and not os.access(args.bin, os.X_OK):
        print(f"bench_decode: {args.bin} is not an executable; build the target qattn_bench_decode or give --bin",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("bench_decode: no CUDA device visible to torch; this benchmark runs on the GPU machine only",
              file=sys.stderr)
        return 3

    meta = metadata(args, torch)
    os.makedirs(args.out, exist_ok=True)
    json_path, md_path = bu.result_paths(args.out, bu.device_slug(meta["device"]), meta["date"], prefix="decode")
    meta["copy_gbps"] = measure_copy_gbps(torch, args)
    print(f"bench_decode: device copy bandwidth {meta['copy_gbps']:.0f} GB/s ({COPY_MB} MB, read + write)", flush=True)
    print(f"bench_decode: {len(points(args))} points x {len(args.variant_list)} variants -> {json_path}", flush=True)
    print("| batch " + "| " + " | ".join(MD_COLUMNS) + " |", flush=True)
    rows = []
    for batch, kv in points(args):
        started = time.perf_counter()
        variants = variants_at(args, batch)
        point_rows = bench_sdpa_point(torch, args, batch, kv, [v for v in variants if v in SDPA_VARIANTS])
        # torch's cached blocks were returned above: the binary gets the GPU memory to itself.
        point_rows += [bench_qattn(args, v, batch, kv) for v in variants if v in QATTN_VARIANTS]
        rows += point_rows
        add_ratios(rows)
        add_copy_shares(rows, meta["copy_gbps"])
        for r in point_rows:
            print(f"| {batch} " + markdown_row(r), flush=True)
        print(f"  [b={batch} kv={kv}: {time.perf_counter() - started:.1f} s]", flush=True)
        # Rewritten after every point: a run stopped by a time limit keeps its finished points.
        write_results(json_path, md_path, meta, rows)

    meta["complete"] = True
    meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    meta["targets"] = evaluate_targets(rows, meta["copy_gbps"])
    write_results(json_path, md_path, meta, rows)
    print("targets:\n  " + "\n  ".join(meta["targets"]))
    failed = [r for r in rows if r["kind"] == "qattn" and r["error"]]
    print(f"bench_decode: {len(rows)} rows, {len(failed)} qattn rows failed; wrote {json_path} and {md_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
