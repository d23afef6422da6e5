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


@needs_gpu
@pytest.mark.parametrize("fmt", ["fp16", "int8", "int4"])
def test_quant_linear_module_op_compile_and_graph(fmt):
    import qattn.torch as qt
    gen = torch.Generator().manual_seed(5)
    dense = torch.nn.Linear(1024, 640, bias=True)
    with torch.no_grad():
        dense.weight.copy_(0.02 * torch.randn(640, 1024, generator=gen))
        dense.bias.copy_(torch.randn(640, generator=gen))
    dense = dense.cuda()
    layer = qt.QuantLinear.from_linear(dense, fmt, dtype=torch.float16)
    x = torch.randn(2, 3, 1024, generator=gen).half().cuda()
    x[..., 11::97] *= 20
    y = layer(x)
    assert y.shape == (2, 3, 640) and y.dtype == torch.float16
    w_fmt = {"fp16": "fp16", "int8": "int8:per_channel", "int4": "int4:per_group"}[fmt]
    ref = x.double().reshape(-1, 1024) @ qattn.unpack_linear_weight(layer.w, layer.w_scale, layer.w_zero, w_fmt).T
    ref = (ref + layer.bias.double()).reshape(2, 3, 640)
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert rel < 1.5e-3, f"{layer.spec}: rel L2 {rel:.2e}"
    # torch.compile traces the op without a graph break and gives the eager bits.
    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(x), y)
    # A CUDA graph of the layer replays on new inputs with the eager bits.
    static_x = x.clone()
    layer(static_x)   # the plan is made outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    x2 = torch.randn(2, 3, 1024, generator=gen).half().cuda()
    static_x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, layer(x2))
