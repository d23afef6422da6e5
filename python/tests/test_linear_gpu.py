"""Linear layers through the wrapper on the GPU: every weight format and dataflow against float64
C = A . W^T + bias with the weights the kernels see (qattn.unpack_linear_weight), and pack_linear_weight
against the C++ packer's rules (skipped without $QATTN_LIBRARY or a CUDA PyTorch)."""
import os

import pytest

import qattn

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY") or not torch.cuda.is_available(),
                               reason="needs $QATTN_LIBRARY and a CUDA PyTorch with a GPU")


@needs_gpu
@pytest.mark.parametrize("fmt", ["fp16", "int8:per_channel", "int4:per_group"])
@pytest.mark.parametrize("m,flow", [(1, "gemv"), (5, "auto"), (24, "flat"), (300, "gemm")])
def test_linear_matches_float64(fmt, m, flow):
    n, k = 1003, 1024
    gen = torch.Generator().manual_seed(m)
    a = torch.randn(m, k, generator=gen)
    a[:, 7::97] *= 20   # activation outlier channels
    w = 0.02 * torch.randn(n, k, generator=gen)
    a, w = a.half().cuda(), w.cuda()
    bias = torch.randn(n, generator=gen).half().cuda()
    pw, scale, zero = qattn.pack_linear_weight(w, fmt)
    spec = f"linear a=fp16 w={fmt} out=fp16 n={n} k={k} bias flow={flow}"
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    with qattn.Runtime(use_cache=False) as rt:
        name, chosen, splits = rt.linear_route(spec, a, pw, c, w_scale=scale, w_zero=zero, bias=bias)
        rt.linear(spec, a, pw, c, w_scale=scale, w_zero=zero, bias=bias)
    torch.cuda.synchronize()
    assert chosen in ("gemv", "flat", "gemm") and (flow == "auto" or chosen == flow), name
    ref = a.double() @ qattn.unpack_linear_weight(pw, scale, zero, fmt).T + bias.double()
    got = c.double()
    assert torch.isfinite(got).all(), name
    rel = ((got - ref).norm() / ref.norm()).item()
    assert rel < 1.5e-3, f"{name} splits={splits}: rel L2 {rel:.2e}"


@needs_gpu
def test_pack_weight_follows_the_format_rules():
    w = 0.05 * torch.randn(64, 256, generator=torch.Generator().manual_seed(3)).cuda()
    codes, scale, _ = qattn.pack_linear_weight(w, "int8:per_channel")
    assert codes.dtype == torch.int8 and codes.abs().max().item() <= 127
    assert torch.allclose(scale, w.abs().amax(dim=1) / 127)
    packed, scale, zero = qattn.pack_linear_weight(w, "int4:per_group")
    assert packed.shape == (64, 128) and scale.shape == zero.shape == (64, 2)
    back = qattn.unpack_linear_weight(packed, scale, zero, "int4:per_group")
    assert ((back - w.double()).abs() <= scale.double().repeat_interleave(128, dim=1) / 2 + 1e-6).all()
