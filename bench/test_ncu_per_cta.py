"""CPU test of bench/ncu_per_cta.py on hand-written Nsight Compute source exports (no GPU, no ncu)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_per_cta  # noqa: E402

HEADER = '"Kernel Name","k",\n"Address","Source","Instructions Executed"\n'


def export(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write("==PROF== noise before the table\n" + HEADER)
    for addr, src, n in rows:
        f.write(f'"{addr}","{src}","{n}"\n')
    f.close()
    return f.name


class PerCta(unittest.TestCase):
    def test_prologue_and_front_loaded_work_are_per_cta(self):
        # 10 CTAs; 8 tiles per CTA in the short run, 32 in the long one (ratio 4).
        short = export([("0x10", "LDC R1, c[0x0][0x28]", 10),        # prologue: once per CTA in both
                        ("0x20", "IMMA R8, R2, R4, R8", 80),         # per tile
                        ("0x30", "SHF.R.S32.HI R1, RZ, R2, R1", 50),  # raises: 5 per CTA of 8 tiles ...
                        ("0x40", "@!P0 BRA 0x20", 80)])
        long_ = export([("0x7f10", "LDC R1, c[0x0][0x28]", 10),
                        ("0x7f20", "IMMA R8, R2, R4, R8", 320),
                        ("0x7f30", "SHF.R.S32.HI R1, RZ, R2, R1", 90),  # ... 9 of 32 in the long run
                        ("0x7f40", "@!P0 BRA 0x7f20", 320)])
        a, b = ncu_per_cta.load(short), ncu_per_cta.load(long_)
        self.assertTrue(ncu_per_cta.same_kernel(a, b))   # addresses differ, the code does not
        per_cta, regions = ncu_per_cta.analyse(a, b, ctas=10, ratio=4)
        self.assertAlmostEqual(per_cta, (10 - 10 / 4) / 10 + (50 - 90 / 4) / 10)   # 0.75 + 2.75
        self.assertEqual(regions[0][:2], (2, 2))   # the raises first, then the prologue
        self.assertAlmostEqual(regions[0][2], 2.75)
        self.assertEqual(regions[1][:2], (0, 0))

    def test_other_kernels_are_refused(self):
        a = ncu_per_cta.load(export([("0x10", "LDC R1, c[0x0][0x28]", 1)]))
        b = ncu_per_cta.load(export([("0x10", "LDC R2, c[0x0][0x28]", 1)]))
        self.assertFalse(ncu_per_cta.same_kernel(a, b))


if __name__ == "__main__":
    unittest.main()
