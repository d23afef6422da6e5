#!/usr/bin/env python3
"""Prefill attention benchmark: qattn FP16 and INT8 against PyTorch SDPA (flash and cuDNN backends) and
SageAttention2's sm90 kernel (--grid peers) on the same inputs, in one run. Writes
prefill_<device>_<date>.json and .md (see bench/README.md).

    PYTHONPATH=python QATTN_LIBRARY=build/lib/libqattn.so python3 bench/bench_prefill.py --quick
"""
import argparse
import datetime
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_utils as bu  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 shapes (d=128 N=4096 causal and not, d=64 N=4096)")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"), help="folder of the result files")
    p.add_argument("--cache", default=None, help="qattn SQLite cache (default: the library's own default)")
    p.add_argument("--d", default=None, help="head dims to keep, e.g. 128 or 64,128")
    p.add_argument("--n", default=None, help="sequence lengths to keep, e.g. 4096,16384")
    p.add_argument("--causal", choices=["yes", "no", "both"], default="both")
    p.add_argument("--grid", choices=["default", "formats", "peers"], default="default",
                   help="default: d 64/128, N 1k/4k/16k, the baseline variants; formats: d 64/128/256, N 1k..32k, "
                        "every qattn variant; peers: the Hopper comparison shapes (H 32) against SageAttention2")
    p.add_argument("--variants", default=None,
                   help="comma list from: " + ", ".join(bu.ALL_VARIANTS) + " (default: the grid's)")
    p.add_argument("--tune", choices=["auto", "off"], default="auto",
                   help="auto: the runtime tunes on a cache miss (during warm-up, untimed); off: default tilings")
    p.add_argument("--iters", type=int, default=30, help="timed calls per row (>= 20)")
    p.add_argument("--warmup", type=int, default=6, help="untimed calls first (>= the number of sets)")
    p.add_argument("--sets", type=int, default=3, help="input sets rotated through (>= 3)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    try:
        args.head_dims = bu.parse_list(args.d, bu.HEAD_DIMS, "head dim", int) if args.d else None
        args.seq_lens = bu.parse_list(args.n, bu.SEQ_LENS, "sequence length", int) if args.n else None
        default_variants = {"formats": list(bu.SDPA_VARIANTS) + list(bu.QATTN_VARIANTS),
                            "peers": bu.PEER_GRID_VARIANTS}.get(args.grid, bu.DEFAULT_VARIANTS)
        args.variant_list = bu.parse_list(args.variants or ",".join(default_variants), bu.ALL_VARIANTS, "variant")
    except ValueError as e:
        p.error(str(e))
    if args.iters < 20 or args.sets < 3 or args.warmup < args.sets:
        p.error("need --iters >= 20, --sets >= 3 and --warmup >= --sets (medians of enough calls, L2 rotation)")
    args.causal_list = {"yes": [True], "no": [False], "both": None}[args.causal]
    return args


def git_commit():
    if os.environ.get("QATTN_GIT_COMMIT"):
        return os.environ["QATTN_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:   # the CUDA API version the driver implements, e.g. 13000
        import ctypes
        value = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(value))
        return f"CUDA driver API {value.value}"
    except OSError:
        return "unknown"


def environment(torch):
    """Device, software versions, date, commit and command line of this run (shared with bench_decode.py)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "device": torch.cuda.get_device_name(0),
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "date": now.strftime("%Y-%m-%d"),
        "started_utc": now.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": bu.shell_command([sys.executable] + sys.argv),
    }


def metadata(args, torch, qattn_version):
    return {
        **environment(torch),
        "qattn": qattn_version,
        "iters": args.iters, "warmup": args.warmup, "sets": args.sets, "seed": args.seed,
        "tune": args.tune, "hidden": bu.HIDDEN, "tokens": bu.TOKENS,
        "complete": False,
    }


def row_base(shape, variant, mode, spec=None):
    row = bu.shape_fields(shape)
    row.update(variant=variant, mode=mode, spec=spec, kernel_name=None, error=None, accuracy=None)
    return row


def measure(row, call, sets, args, flops, accuracy_of, bt):
    """Fills a row with timings and accuracy; any failure becomes the row's error, never the run's."""
    try:
        first = time.perf_counter()
        call(0)          # compiles / tunes on a miss: reported, never timed
        bt.torch.cuda.synchronize()
        row["first_call_s"] = round(time.perf_counter() - first, 4)
        row["accuracy"] = accuracy_of()
        times = bt.time_calls(call, sets, args.warmup, args.iters)
        row.update(bu.summarize_times(times))
        row["times_ms"] = [round(t, 5) for t in times]
        row["tflops"] = bu.tflops(flops, row["time_ms"])
    except Exception as e:   # noqa: BLE001 — a failed variant (unsupported shape, qattn error) is a result
        row["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=2)
    return row


def bench_sdpa(variant, shape, inputs, reference, flops, args, bt):
    backend = bu.SDPA_VARIANTS[variant]
    last = {}

    def sdpa(i):
        last[i] = bt.sdpa_call(backend, *inputs[i], shape.causal)

    row = row_base(shape, variant, "sdpa")
    return measure(row, sdpa, args.sets, args, flops, lambda: bt.accuracy(last[0], reference, shape), bt)


def bench_qattn(variant, shape, inputs, outs, reference, flops, args, bt, runtime):
    """Two rows: the attention kernel alone on prepared inputs, and qattn_attention end to end."""
    spec = bu.qattn_spec(variant, shape)
    accuracy_of = lambda: bt.accuracy(outs[0], reference, shape)  # noqa: E731
    prepared = []

    def kernel_only(i):
        prepared[i].run(out=outs[i])

    def end_to_end(i):
        runtime.attention(*inputs[i], spec, out=outs[i])

    # NaN first: each mode's accuracy must come from its own output, not from what a previous one left.
    for o in outs:
        o.fill_(float("nan"))
    kernel_row = row_base(shape, variant, "kernel", spec)
    try:
        started = time.perf_counter()
        for i in range(args.sets):   # quantizes once per set; may compile or tune on a cache miss
            prepared.append(runtime.prepare(*inputs[i], spec))
        bt.torch.cuda.synchronize()
        kernel_row["prepare_s"] = round(time.perf_counter() - started, 4)
        kernel_row["kernel_name"] = prepared[0].kernel_name
        measure(kernel_row, kernel_only, args.sets, args, flops, accuracy_of, bt)
    except Exception as e:   # noqa: BLE001
        kernel_row["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=2)
    finally:
        for p in prepared:
            p.close()

    for o in outs:
        o.fill_(float("nan"))
    e2e_row = row_base(shape, variant, "e2e", spec)
    e2e_row["kernel_name"] = kernel_row["kernel_name"]   # same spec and shape bucket
    measure(e2e_row, end_to_end, args.sets, args, flops, accuracy_of, bt)
    return [kernel_row, e2e_row]


def bench_peer(variant, shape, inputs, outs, reference, flops, args, bt):
    """SageAttention2 (bench/peers/sage.py): its kernel alone on inputs it quantized itself, and its call
    end to end from fp16."""
    from peers import sage
    gran = bu.PEER_VARIANTS[variant]
    accuracy_of = lambda: bt.accuracy(outs[0], reference, shape)  # noqa: E731
    rows = [row_base(shape, variant, "kernel"), row_base(shape, variant, "e2e")]
    why = sage.import_error()
    if why:
        for r in rows:
            r["error"] = why
        return rows
    prepared = []

    def kernel_only(i):
        prepared[i].run(outs[i])

    def end_to_end(i):
        outs[i].copy_(sage.end_to_end(*inputs[i], shape.causal, gran))

    for o in outs:
        o.fill_(float("nan"))
    try:
        prepared += [sage.KernelOnly(*inputs[i], shape.causal, gran) for i in range(args.sets)]
        measure(rows[0], kernel_only, args.sets, args, flops, accuracy_of, bt)
    except Exception as e:   # noqa: BLE001
        rows[0]["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=2)
    del prepared
    for o in outs:
        o.fill_(float("nan"))
    measure(rows[1], end_to_end, args.sets, args, flops, accuracy_of, bt)
    return rows


def bench_shape(shape, args, bt, runtime):
    """Every requested variant on one shape, on the same input sets. Returns the rows."""
    torch = bt.torch
    device = torch.device("cuda", 0)
    inputs = [bt.make_inputs(shape, args.seed + 7919 * i + 31 * shape.d + shape.n + shape.causal, device)
              for i in range(args.sets)]
    reference = bt.reference_slice(*inputs[0], shape)
    flops = bu.attention_flops(shape)
    outs = [torch.empty_like(inputs[i][0]) for i in range(args.sets)]
    rows = []
    for variant in args.variant_list:
        if variant in bu.SDPA_VARIANTS:
            rows.append(bench_sdpa(variant, shape, inputs, reference, flops, args, bt))
        elif variant in bu.PEER_VARIANTS:
            rows += bench_peer(variant, shape, inputs, outs, reference, flops, args, bt)
        else:
            rows += bench_qattn(variant, shape, inputs, outs, reference, flops, args, bt, runtime)
    del inputs, outs
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_prefill: no CUDA device visible to torch; this benchmark runs on the GPU machine only",
              file=sys.stderr)
        return 3
    import bench_torch as bt

    runtime, qattn_version = None, None
    if any(v in bu.QATTN_VARIANTS for v in args.variant_list):
        sys.path.insert(0, os.path.join(REPO, "python"))
        import qattn
        runtime = qattn.Runtime(cache_path=args.cache, tune=args.tune == "auto", device=0)
        qattn_version = qattn.version()

    shapes = bu.shape_grid(args.quick, args.head_dims, args.seq_lens, args.causal_list, args.grid)
    if not shapes:
        print("bench_prefill: the filters leave no shape to run", file=sys.stderr)
        return 2
    meta = metadata(args, torch, qattn_version)
    meta["accuracy_slice"] = bt.SLICE_TEXT
    os.makedirs(args.out, exist_ok=True)
    json_path, md_path = bu.result_paths(args.out, bu.device_slug(meta["device"]), meta["date"])
    print(f"bench_prefill: {len(shapes)} shapes x {len(args.variant_list)} variants -> {json_path}", flush=True)

    print("| " + " | ".join(bu.MD_COLUMNS) + " |", flush=True)
    rows = []
    for shape in shapes:
        started = time.perf_counter()
        shape_rows = bench_shape(shape, args, bt, runtime)
        rows += shape_rows
        bu.add_ratios(rows)
        for r in shape_rows:
            print(bu.markdown_row(r), flush=True)
        print(f"  [{shape.label}: {time.perf_counter() - started:.1f} s]", flush=True)
        # Rewritten after every shape: a run stopped by a time limit still leaves its finished shapes.
        bu.write_json(json_path, meta, rows)
        bu.write_markdown(md_path, meta, rows)

    meta["complete"] = True
    meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    bu.write_json(json_path, meta, rows)
    bu.write_markdown(md_path, meta, rows)
    if runtime is not None:
        runtime.close()
    failed = [r for r in rows if r["error"]]
    print(f"bench_prefill: {len(rows)} rows, {len(failed)} failed; wrote {json_path} and {md_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
