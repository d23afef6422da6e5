"""Append + decode through the Python wrapper on the GPU against float64 attention over the unquantized
tokens (skipped without $QATTN_LIBRARY or a CUDA PyTorch)."""
import math
import os

import pytest

import qattn

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY") or not torch.cuda.is_available(),
                               reason="needs $QATTN_LIBRARY and a CUDA PyTorch with a GPU")


def reference(q, k, v, kv_lens, gqa):
    """float64 attention of q [b, hq, 1, d] over the first kv_lens[b] tokens of k, v [b, hkv, n, d]."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b, n in enumerate(kv_lens.tolist()):
        kk = k[b, :, :n].double().repeat_interleave(gqa, dim=0)
        vv = v[b, :, :n].double().repeat_interleave(gqa, dim=0)
        p = torch.softmax(q[b].double() @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        out[b] = p @ vv
    return out


@needs_gpu
@pytest.mark.parametrize("fmt,paged,max_rel", [("int8:per_token", False, 0.06), ("int8:per_token", True, 0.06),
                                              ("fp16", False, 0.01)])
def test_append_then_decode_matches_float64(tmp_path, fmt, paged, max_rel):
    spec = f"decode qk={fmt} pv={fmt} out=fp16 d=128 gqa=4" + (" paged" if paged else "")
    b, hkv, gqa, d, n, cap, page = 2, 2, 4, 128, 300, 304, 16
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(b, hkv, n, d, generator=gen)
    k[..., 5::32] = 6 + 3 * k[..., 5::32]   # outlier channels
    k, v = k.half().cuda(), torch.randn(b, hkv, n, d, generator=gen).half().cuda()
    q = torch.randn(b, hkv * gqa, 1, d, generator=gen).half().cuda()
    if paged:
        pages = b * cap // page
        table = torch.randperm(pages, generator=gen).int().view(b, cap // page).cuda()
        nbytes = qattn.kv_cache_bytes(spec, pages, hkv, page)
        kc, vc = (torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(2))
        cache = qattn.KvCache(kc, vc, page_size=page, block_table=table)
    else:
        nbytes = qattn.kv_cache_bytes(spec, b, hkv, cap)
        kc, vc = (torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(2))
        cache = qattn.KvCache(kc, vc, capacity=cap)
    kv_lens = torch.tensor([n, 257], dtype=torch.int32, device="cuda")
    with qattn.Runtime(cache_path=tmp_path / "c.db", tune=False) as rt:
        rt.append_kv(spec, k, v, cache, torch.zeros(b, dtype=torch.int32, device="cuda"))
        out = rt.decode(spec, q, cache, kv_lens, out=torch.full_like(q, float("nan")))
        torch.cuda.synchronize()
    ref = reference(q, k, v, kv_lens, gqa)
    got = out.double()
    assert torch.isfinite(got).all()
    rel = ((got - ref).norm() / ref.norm()).item()
    cos = torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0).item()
    assert rel <= max_rel and cos >= 1 - max_rel, (rel, cos)
