"""CPU tests of the benchmark's pure-Python parts (and of its torch parts when torch is installed).

    python3 -m pytest -q bench/test_bench_utils.py      (or: python3 -m unittest bench/test_bench_utils.py)
"""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode  # noqa: E402
import bench_prefill  # noqa: E402
import compare_runs  # noqa: E402
import bench_utils as bu  # noqa: E402

try:
    import torch
    import bench_torch as bt
except ImportError:
    torch = None


def sample_rows():
    flash = {"d": 128, "n": 4096, "causal": False, "batch": 4, "heads": 16, "variant": "sdpa_flash",
             "mode": "sdpa", "time_ms": 2.0, "error": None, "accuracy": {"cosine": 0.9999, "rel_l2": 1e-3,
                                                                         "max_abs": 2e-3, "finite": True}}
    cudnn = dict(flash, variant="sdpa_cudnn", time_ms=1.0)
    kernel = dict(flash, variant="qattn_int8_per_token", mode="kernel", time_ms=0.5, tflops=1099.5)
    e2e = dict(kernel, mode="e2e", time_ms=0.8)
    other_shape_flash = dict(flash, causal=True, time_ms=100.0)
    failed = dict(kernel, variant="qattn_int8_per_tensor", time_ms=None, error="BadInput: qk=int8 | no",
                  accuracy=None)
    return [flash, cudnn, kernel, e2e, other_shape_flash, failed]


class ShapesAndSpecs(unittest.TestCase):
    def test_full_grid_keeps_hidden_and_tokens(self):
        grid = bu.shape_grid()
        self.assertEqual(len(grid), 12)
        for s in grid:
            self.assertEqual(s.batch * s.n, 16384)
            self.assertEqual(s.heads * s.d, 2048)
        self.assertIn(bu.Shape(d=64, n=16384, causal=True, batch=1, heads=32), grid)
        self.assertIn(bu.Shape(d=128, n=1024, causal=False, batch=16, heads=16), grid)

    def test_filters_and_quick(self):
        self.assertEqual(len(bu.shape_grid(quick=True)), 3)
        only = bu.shape_grid(head_dims=[128], seq_lens=[16384], causal=[True])
        self.assertEqual(only, [bu.Shape(d=128, n=16384, causal=True, batch=1, heads=16)])
        self.assertEqual(bu.shape_grid(quick=True, head_dims=[64], causal=[True]), [])

    def test_make_shape_rejects_a_head_dim_that_does_not_divide_the_width(self):
        with self.assertRaisesRegex(ValueError, "d=96"):
            bu.make_shape(96, 4096, False)

    def test_specs_are_the_documented_ones(self):
        causal = bu.make_shape(128, 4096, True)
        plain = bu.make_shape(64, 1024, False)
        self.assertEqual(bu.qattn_spec("qattn_fp16", causal), "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal")
        self.assertEqual(bu.qattn_spec("qattn_int8_per_token", plain),
                         "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv")
        self.assertEqual(bu.qattn_spec("qattn_int8_per_block", causal),
                         "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=128 causal smooth=kv")
        self.assertIn("qk=int8:per_tensor", bu.qattn_spec("qattn_int8_per_tensor", plain))

    def test_parse_list(self):
        self.assertEqual(bu.parse_list("128, 64", bu.HEAD_DIMS, "head dim", int), [128, 64])
        with self.assertRaisesRegex(ValueError, "unknown variant 'sdpa_mem'; accepted: sdpa_flash"):
            bu.parse_list("sdpa_mem", bu.ALL_VARIANTS, "variant")
        with self.assertRaisesRegex(ValueError, "empty"):
            bu.parse_list(" , ", bu.ALL_VARIANTS, "variant")


class Arithmetic(unittest.TestCase):
    def test_flops_follow_4_b_h_n2_d_halved_when_causal(self):
        s = bu.make_shape(128, 4096, False)   # B=4, H=16
        self.assertEqual(bu.attention_flops(s), 4 * 4 * 16 * 4096 * 4096 * 128)
        self.assertEqual(bu.attention_flops(bu.make_shape(128, 4096, True)), 2 * 4 * 16 * 4096 * 4096 * 128)

    def test_tflops(self):
        self.assertAlmostEqual(bu.tflops(549755813888, 1.0), 549.755813888)
        self.assertAlmostEqual(bu.tflops(2e12, 4.0), 500.0)
        self.assertIsNone(bu.tflops(1e12, 0.0))
        self.assertIsNone(bu.tflops(1e12, None))

    def test_median_and_summary(self):
        self.assertEqual(bu.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(bu.median([4.0, 1.0, 3.0, 2.0]), 2.5)
        with self.assertRaises(ValueError):
            bu.median([])
        summary = bu.summarize_times([1.5, 1.0, 9.0, 1.2, 1.1])
        self.assertEqual(summary, {"time_ms": 1.2, "time_ms_min": 1.0, "time_ms_max": 9.0, "samples": 5})

    def test_ratios_compare_within_a_shape_only(self):
        rows = bu.add_ratios(sample_rows())
        flash, cudnn, kernel, e2e, other, failed = rows
        self.assertAlmostEqual(kernel["ratio_flash"], 4.0)
        self.assertAlmostEqual(kernel["ratio_cudnn"], 2.0)
        self.assertAlmostEqual(e2e["ratio_cudnn"], 1.25)
        self.assertAlmostEqual(flash["ratio_flash"], 1.0)
        self.assertAlmostEqual(cudnn["ratio_flash"], 2.0)
        self.assertAlmostEqual(other["ratio_flash"], 1.0)
        self.assertIsNone(other["ratio_cudnn"])     # no cuDNN row for the causal shape
        self.assertIsNone(failed["ratio_flash"])
        self.assertAlmostEqual(e2e["quant_overhead"], 0.6)   # (0.8 - 0.5) / 0.5
        self.assertIsNone(kernel["quant_overhead"])
        self.assertIsNone(other["quant_overhead"])          # no kernel row of its own

    def test_formats_grid_covers_issue_3(self):
        grid = bu.shape_grid(grid="formats")
        self.assertEqual(len(grid), 3 * 6 * 2)
        self.assertIn(bu.Shape(d=256, n=32768, causal=True, batch=1, heads=8), grid)
        self.assertIn(bu.Shape(d=64, n=2048, causal=False, batch=8, heads=32), grid)
        self.assertEqual(len(bu.shape_grid(grid="formats", head_dims=[128], seq_lens=[4096])), 2)


    def test_peers_grid_is_the_hopper_comparison(self):
        grid = bu.shape_grid(grid="peers")
        self.assertEqual(len(grid), 5 * 2)
        self.assertIn(bu.Shape(d=128, n=1024, causal=True, batch=16, heads=32), grid)
        self.assertIn(bu.Shape(d=64, n=17776, causal=False, batch=1, heads=24), grid)
        self.assertEqual(len(bu.shape_grid(grid="peers", head_dims=[64])), 2)
        for v in bu.PEER_GRID_VARIANTS:
            self.assertIn(v, bu.ALL_VARIANTS)
        self.assertIn("sage2_per_warp", bu.PEER_VARIANTS)


class Files(unittest.TestCase):
    def test_device_slug(self):
        self.assertEqual(bu.device_slug("NVIDIA H100 80GB HBM3"), "h100-80gb-hbm3")
        self.assertEqual(bu.device_slug("NVIDIA H200"), "h200")
        self.assertEqual(bu.device_slug("  "), "unknown-device")

    def test_result_paths_never_overwrite(self):
        with tempfile.TemporaryDirectory() as d:
            j1, m1 = bu.result_paths(d, "h100", "2026-01-02")
            self.assertEqual(os.path.basename(j1), "prefill_h100_2026-01-02.json")
            self.assertEqual(os.path.basename(m1), "prefill_h100_2026-01-02.md")
            open(m1, "w").close()
            j2, _ = bu.result_paths(d, "h100", "2026-01-02")
            self.assertEqual(os.path.basename(j2), "prefill_h100_2026-01-02_2.json")

    def test_json_round_trip_leaves_no_temporary(self):
        meta = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-01-02", "command": "python3 b.py --quick"}
        rows = bu.add_ratios(sample_rows())
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            bu.write_json(path, meta, rows)
            bu.write_json(path, dict(meta, complete=True), rows)
            with open(path) as f:
                back = json.load(f)
            self.assertEqual(os.listdir(d), ["r.json"])
        self.assertEqual(back["meta"]["complete"], True)
        self.assertEqual(back["rows"][2]["ratio_flash"], 4.0)
        self.assertEqual(len(back["rows"]), 6)

    def test_markdown_table(self):
        meta = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-01-02", "driver": "580.159",
                "command": "python3 bench/bench_prefill.py --quick", "iters": 30, "sets": 3, "complete": False}
        md = bu.render_markdown(meta, bu.add_ratios(sample_rows()))
        lines = md.splitlines()
        table = [l for l in lines if l.startswith("|")]
        self.assertEqual(len(table), 2 + 6)
        self.assertTrue(all(l.count("|") == len(bu.MD_COLUMNS) + 1 for l in table), table)
        kernel = table[2 + 2]
        self.assertIn("| qattn_int8_per_token | kernel | 0.500 | 1100 | 4.00× | 2.00× | – | 0.999900 |", kernel)
        self.assertIn("| qattn_int8_per_token | e2e | 0.800 |", table[2 + 3])
        self.assertIn("| +60% |", table[2 + 3])
        self.assertIn("failed: BadInput: qk=int8 / no", table[-1])
        self.assertIn("- command: `python3 bench/bench_prefill.py --quick`", lines)
        self.assertIn("incomplete run", md)

    def test_markdown_marks_non_finite_output(self):
        row = dict(sample_rows()[2], accuracy={"cosine": None, "rel_l2": None, "max_abs": None, "finite": False})
        self.assertIn("NaN/Inf in output", bu.markdown_row(row))


class CommandLine(unittest.TestCase):
    def test_filters_parse(self):
        args = bench_prefill.parse_args(["--quick", "--variants", "sdpa_flash,qattn_fp16", "--d", "128",
                                         "--causal", "yes"])
        self.assertEqual(args.variant_list, ["sdpa_flash", "qattn_fp16"])
        self.assertEqual(args.head_dims, [128])
        self.assertEqual(args.causal_list, [True])

    def test_bad_flags_stop_with_a_message(self):
        for argv in (["--variants", "sdpa_mem"], ["--iters", "10"], ["--sets", "2"], ["--n", "3000"], ["--grid", "all"]):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
                bench_prefill.parse_args(argv)
            self.assertIn("error:", err.getvalue(), argv)


@unittest.skipIf(torch is None, "torch is not installed: the torch parts of the benchmark are not checked")
class TorchParts(unittest.TestCase):
    shape = bu.Shape(d=16, n=40, causal=False, batch=2, heads=3)

    def naive_row(self, q, k, v, h, i, causal):
        """Attention of query row i of head h, batch 0, in plain Python floats."""
        d = q.shape[-1]
        keys = range(i + 1) if causal else range(k.shape[1])
        logits = [sum(float(q[0, i, h, c]) * float(k[0, j, h, c]) for c in range(d)) / math.sqrt(d) for j in keys]
        m = max(logits)
        w = [math.exp(x - m) for x in logits]
        return [sum(w[n] * float(v[0, j, h, c]) for n, j in enumerate(keys)) / sum(w) for c in range(d)]

    def test_inputs_have_outliers_and_no_zeros(self):
        q, k, v = bt.make_inputs(self.shape, 7, "cpu")
        self.assertEqual(q.dtype, torch.float16)
        self.assertEqual(tuple(q.shape), (2, 40, 3, 16))
        for t in (q, k, v):
            self.assertGreater(float(t.float().std()), 0.5)
        k_mean = k.float().mean(dim=(0, 1)).abs()          # [H, d]: the shared channel bias
        self.assertGreater(float(k_mean.max()), 1.0)
        q_channel = q.float().abs().mean(dim=(0, 1, 2))     # [d]: four channels ~10x larger
        self.assertGreater(float(q_channel.max() / q_channel.median()), 5.0)
        q2, _, _ = bt.make_inputs(self.shape, 8, "cpu")
        self.assertFalse(torch.equal(q, q2))

    def test_reference_matches_a_naive_computation(self):
        for causal in (False, True):
            shape = bu.Shape(d=16, n=40, causal=causal, batch=2, heads=3)
            q, k, v = bt.make_inputs(shape, 3, "cpu")
            ref = bt.reference_slice(q, k, v, shape)
            heads, rows = bt.slice_index(shape)
            self.assertEqual(heads, [0, 1, 2])
            self.assertEqual(tuple(ref.shape), (3, 40, 16))
            for hi, h in enumerate(heads):
                for ri in (0, 17, 39):
                    expected = self.naive_row(q, k, v, h, rows[ri], causal)
                    for c in range(16):
                        self.assertAlmostEqual(float(ref[hi, ri, c]), expected[c], places=9)
            if causal:   # the first query sees only the first key
                self.assertTrue(torch.allclose(ref[:, 0, :], v[0, 0, heads, :].double()))

    def test_slice_spreads_rows_and_keeps_the_last(self):
        heads, rows = bt.slice_index(bu.make_shape(128, 4096, False))
        self.assertEqual(heads, [0, 8, 15])
        self.assertEqual(len(rows), bt.SLICE_ROWS)
        self.assertEqual((rows[0], rows[-1]), (0, 4095))

    def test_accuracy_metrics(self):
        q, k, v = bt.make_inputs(self.shape, 5, "cpu")
        ref = bt.reference_slice(q, k, v, self.shape)
        exact = torch.zeros(2, 40, 3, 16, dtype=torch.float64)
        for hi, h in enumerate(bt.slice_index(self.shape)[0]):
            exact[0, :, h, :] = ref[hi]
        same = bt.accuracy(exact, ref, self.shape)
        self.assertAlmostEqual(same["cosine"], 1.0, places=12)
        self.assertEqual(same["rel_l2"], 0.0)
        off = exact.clone()
        off[0, 3, 1, 2] += 0.5
        worse = bt.accuracy(off, ref, self.shape)
        self.assertAlmostEqual(worse["max_abs"], 0.5, places=12)
        self.assertAlmostEqual(worse["rel_l2"], 0.5 / float(ref.norm()), places=12)
        self.assertLess(worse["cosine"], 1.0)
        off[0, 0, 0, 0] = float("nan")
        self.assertEqual(bt.accuracy(off, ref, self.shape)["finite"], False)



class CompareRunsTest(unittest.TestCase):
    def test_reports_kernel_and_end_to_end_change_per_shape(self):
        def rows(kernel_ms, e2e_ms):
            base = {"d": 128, "n": 4096, "causal": True, "variant": "qattn_int8_fp8"}
            return {(128, 4096, True, "qattn_int8_fp8", "kernel"): dict(base, mode="kernel", time_ms=kernel_ms),
                    (128, 4096, True, "qattn_int8_fp8", "e2e"): dict(base, mode="e2e", time_ms=e2e_ms)}
        lines = compare_runs.compare(rows(0.5, 0.65), rows(0.51, 0.6), ["qattn_int8_fp8"])
        self.assertEqual(len(lines), 1)
        self.assertIn("kernel    500.0 ->    510.0 us (+2.0%)", lines[0])
        self.assertIn("e2e    650.0 ->    600.0 us (-7.7%)", lines[0])
        self.assertIn("overhead over A's kernel 30.0% -> 20.0%", lines[0])
        self.assertEqual(compare_runs.compare(rows(0.5, 0.65), rows(0.5, 0.6), ["other"]), [])

class DecodeRooflineTest(unittest.TestCase):
    def rows(self):
        def row(variant, us, gbps):
            r = bench_decode.row_base(8, 131072, variant)
            r.update(median_us=us, gbps=gbps, non_finite=0)
            return r
        return [row("sdpa_flash", 1400.0, 3000.0), row("qattn_int8", 760.0, 2900.0),
                row("qattn_int4_token", 470.0, 2420.0)]

    def test_shares_and_verdicts_follow_the_measured_copy_bandwidth(self):
        rows = bench_decode.add_copy_shares(self.rows(), 3300.0)
        self.assertAlmostEqual(rows[1]["of_copy"], 2900.0 / 3300.0)
        lines = bench_decode.evaluate_roofline(rows, 3300.0)
        self.assertEqual(len(lines), len(bench_decode.ROOFLINE_TARGETS))
        by_variant = {v: line for (v, _), line in zip(bench_decode.ROOFLINE_TARGETS, lines)}
        self.assertTrue(by_variant["qattn_int8"].startswith("PASS"), by_variant["qattn_int8"])
        self.assertIn("88%", by_variant["qattn_int8"])
        self.assertTrue(by_variant["qattn_int4_token"].startswith("MISS"), by_variant["qattn_int4_token"])
        self.assertTrue(by_variant["qattn_fp8"].startswith("N/A"), by_variant["qattn_fp8"])

    def test_without_a_copy_measurement_nothing_passes(self):
        rows = bench_decode.add_copy_shares(self.rows(), None)
        self.assertIsNone(rows[1]["of_copy"])
        self.assertTrue(all(line.startswith("N/A") for line in bench_decode.evaluate_roofline(rows, None)))
        table = bench_decode.render_markdown({"device": "X", "copy_gbps": None}, rows)
        self.assertIn("| of copy |", table)


if __name__ == "__main__":
    unittest.main()
