"""CPU test of bench/sass_mix.py's SASS parsing (no toolkit needed: a hand-written listing)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_mix  # noqa: E402

LISTING = """
        Function : qattn_prefill_sm90a_qki8tok_pvi8chn_of16_d128
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IMMA.16832.S8.S8 R8, R2.ROW, R4.COL, R8 ;
        /*0020*/                   HMMA.16816.F32 R12, R2, R4, R12 ;
        /*0030*/               @P0 BRA 0x10 ;
        /*0040*/                   IMMA.16832.S8.S8 R8, R2.ROW, R4.COL, R8 ;
        /*0050*/                   IMMA.16832.U8.S8 R8, R2.ROW, R4.COL, R8 ;
        /*0060*/                   FMUL R3, R3, R4 ;
        /*0070*/              @!P1 BRA 0x40 ;
        /*0080*/                   BRA 0x80 ;
        /*0090*/                   EXIT ;
"""


class SassMix(unittest.TestCase):
    def test_parse_and_families(self):
        instrs = sass_mix.parse_sass(LISTING)
        self.assertEqual(len(instrs), 10)
        self.assertEqual(instrs[1][:2], (0x10, "IMMA.16832.S8.S8"))
        self.assertEqual(sass_mix.matrix_family("HGMMA.64x128x16.F32"), "HGMMA")
        self.assertIsNone(sass_mix.matrix_family("FMUL"))

    def test_main_loop_is_the_largest_backward_branch_with_matrix_work(self):
        instrs = sass_mix.parse_sass(LISTING)
        self.assertEqual(sass_mix.main_loop(instrs), (0x40, 0x70))   # 0x10..0x30 is shorter; 0x80 self-loop has none
        summary = sass_mix.summarize(LISTING)
        self.assertEqual(summary["kernel"], {"IMMA.16832.S8.S8": 2, "HMMA.16816.F32": 1, "IMMA.16832.U8.S8": 1})
        self.assertEqual(summary["loop"], {"IMMA.16832.S8.S8": 1, "IMMA.16832.U8.S8": 1})
        self.assertEqual(summary["loop_instructions"], 4)

    def test_render_names_kernel_and_failures(self):
        rows = [{"spec": "s", "name": "k", **sass_mix.summarize(LISTING)}, {"spec": "bad", "error": "no"}]
        text = sass_mix.render(rows)
        self.assertIn("| `k` | HMMA.16816.F32 ×1, IMMA.16832.S8.S8 ×2, IMMA.16832.U8.S8 ×1 | IMMA ×2 / 4 |", text)
        self.assertIn("| `bad` | failed: no | – |", text)


if __name__ == "__main__":
    unittest.main()
