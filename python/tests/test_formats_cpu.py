"""The drop-in calls' format names, arch rules and argument checks (qattn.formats): torch-free, no GPU.
The specs they build are compiled by the library for the archs they claim, so a name that maps to a
spec the kernels refuse fails here."""
import os

import pytest

import qattn
from qattn import formats

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"), reason="needs $QATTN_LIBRARY")


def test_auto_is_fp8_pv_where_the_tensor_cores_have_fp8():
    assert formats.prefill_format("auto", (9, 0)) == "int8_fp8"
    assert formats.prefill_format("auto", (8, 9)) == "int8_fp8"
    assert formats.prefill_format("auto", (8, 6)) == "int8"
    assert formats.prefill_format("auto", (8, 0)) == "int8"


def test_aliases_and_refusals():
    assert formats.prefill_format("fp8", (9, 0)) == "int8_fp8"
    assert formats.prefill_format("bf16", (8, 0)) == "fp16"
    with pytest.raises(qattn.BadInput, match=r"needs sm_89 or newer.*sm_80"):
        formats.prefill_format("fp8", (8, 0))
    with pytest.raises(qattn.BadInput, match=r"fmt 'int3' is not a prefill format; accepted: auto, fp16"):
        formats.prefill_format("int3", (9, 0))
    with pytest.raises(qattn.BadInput, match="must be a str"):
        formats.prefill_format(8, (9, 0))
    with pytest.raises(qattn.BadInput, match="not a KV-cache format"):
        formats.decode_format("int8_fp8")
    # FP8 Q·Kᵀ runs on Hopper's wgmma only.
    assert formats.prefill_format("fp8_fp8", (9, 0)) == "fp8_fp8"
    with pytest.raises(qattn.BadInput, match=r"needs sm_90 or newer \(Hopper's FP8 wgmma\).*sm_89"):
        formats.prefill_format("fp8_fp8", (8, 9))
    assert formats.prefill_spec("fp8_fp8", (9, 0), 128, "float16", True, 8, 8) == \
        "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel smooth=kv out=fp16 d=128 causal"


def test_prefill_spec_takes_type_head_dim_causal_and_gqa_from_the_tensors():
    assert formats.prefill_spec("int8", (9, 0), 128, "bfloat16", True, 32, 8) == \
        "prefill qk=int8:per_token pv=int8:per_channel smooth=kv out=bf16 d=128 causal gqa=4"
    assert formats.prefill_spec("fp16", (8, 0), 64, "float16", False, 8, 8) == \
        "prefill qk=fp16 pv=fp16 out=fp16 d=64"
    with pytest.raises(qattn.BadInput, match="accepted: float16, bfloat16"):
        formats.prefill_spec("int8", (9, 0), 64, "float32", False, 8, 8)
    with pytest.raises(qattn.BadInput, match="multiple of k/v's"):
        formats.prefill_spec("int8", (9, 0), 64, "float16", False, 6, 4)


def test_decode_spec_and_scale_and_layout_checks():
    assert formats.decode_spec("fp8", 128, "bfloat16", 32, 8, paged=True) == \
        "decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16 d=128 gqa=4 paged"
    assert formats.decode_spec("fp16", 64, "float16", 4, 4, paged=False) == "decode qk=fp16 pv=fp16 out=fp16 d=64"
    assert formats.check_scale(None) == 0.0 and formats.check_scale(0.125) == 0.125
    for bad in (0.0, -1.0, True, "0.1"):
        with pytest.raises(qattn.BadInput, match="scale"):
            formats.check_scale(bad)
    with pytest.raises(qattn.BadInput, match="layout 'sbhd'"):
        formats.check_layout("sbhd")


ARCH_OF = {(8, 0): "sm_80", (8, 9): "sm_89", (9, 0): "sm_90a"}


@needs_library
@pytest.mark.parametrize("capability", list(ARCH_OF))
def test_every_format_name_compiles_for_the_archs_it_claims(tmp_path, capability):
    with qattn.Runtime(cache_path=tmp_path / "c.db") as rt:
        for name, (_, oldest, _) in formats.PREFILL_FORMATS.items():
            if capability < oldest:
                continue
            spec = formats.prefill_spec(name, capability, 128, "bfloat16", True, 16, 4)
            assert rt.compile(f"{spec} arch={ARCH_OF[capability]}"), spec
        for name in formats.DECODE_FORMATS:
            spec = formats.decode_spec(name, 128, "float16", 16, 4, paged=True)
            assert rt.compile(f"{spec} arch={ARCH_OF[capability]}"), spec
