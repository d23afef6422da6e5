"""Runtime.attention_varlen on the GPU against one Runtime.attention call per sequence (batch 1, its exact
lengths): each sequence's rows see the same arithmetic in both (an untuned runtime runs the same tiling,
and the quantizers scale per token and take channel statistics over the sequence's own tokens), so out
and lse must match bit for bit. Skipped without $QATTN_LIBRARY or a CUDA PyTorch."""
import math
import os

import pytest

import qattn

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY") or not torch.cuda.is_available(),
                               reason="needs $QATTN_LIBRARY and a CUDA PyTorch with a GPU")

LENS_Q, LENS_KV = [1, 17, 130], [1, 40, 130]
HQ, HKV, D = 4, 2, 128
SPECS = ["prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=2",
         "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=k"]


def _offsets(lens):
    return [0] + [sum(lens[:i + 1]) for i in range(len(lens))]


def _packed_inputs(gen):
    tq, tkv = sum(LENS_Q), sum(LENS_KV)
    q = torch.randn(tq, HQ, D, generator=gen)
    k = torch.randn(tkv, HKV, D, generator=gen)
    k[..., 5::32] = 6 + 3 * k[..., 5::32]   # outlier channels: what smooth=k removes
    v = torch.randn(tkv, HKV, D, generator=gen)
    return q.half().cuda(), k.half().cuda(), v.half().cuda()


def _reference(q, k, v, cu_q, cu_kv):
    """float64 causal attention, the mask aligned at each sequence's end: out [total_q, hq, d]."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b, (lq, lk) in enumerate(zip(LENS_Q, LENS_KV)):
        qq = q[cu_q[b]:cu_q[b + 1]].double().transpose(0, 1)                               # [hq, lq, d]
        kk = k[cu_kv[b]:cu_kv[b + 1]].double().transpose(0, 1).repeat_interleave(HQ // HKV, dim=0)
        vv = v[cu_kv[b]:cu_kv[b + 1]].double().transpose(0, 1).repeat_interleave(HQ // HKV, dim=0)
        s = qq @ kk.transpose(-1, -2) / math.sqrt(D)
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        s = s.masked_fill(j > i + lk - lq, float("-inf"))
        out[cu_q[b]:cu_q[b + 1]] = (torch.softmax(s, dim=-1) @ vv).transpose(0, 1)
    return out


@needs_gpu
@pytest.mark.parametrize("spec", SPECS)
def test_varlen_matches_one_call_per_sequence_bit_for_bit(tmp_path, spec):
    gen = torch.Generator().manual_seed(7)
    q, k, v = _packed_inputs(gen)
    cu_q, cu_kv = _offsets(LENS_Q), _offsets(LENS_KV)
    cu_q_dev = torch.tensor(cu_q, dtype=torch.int32, device="cuda")
    cu_kv_dev = torch.tensor(cu_kv, dtype=torch.int32, device="cuda")
    with qattn.Runtime(cache_path=tmp_path / "c.db", tune=False) as rt:
        lse = torch.full((q.shape[0], HQ), float("nan"), device="cuda")
        out = rt.attention_varlen(q, k, v, cu_q_dev, cu_kv_dev, max(LENS_Q), max(LENS_KV), spec, lse=lse)
        for b in range(len(LENS_Q)):   # sequence b alone, batch 1, [1, s, h, d] views of the packed rows
            qb, kb, vb = q[cu_q[b]:cu_q[b + 1]], k[cu_kv[b]:cu_kv[b + 1]], v[cu_kv[b]:cu_kv[b + 1]]
            lse_b = torch.full((1, HQ, LENS_Q[b]), float("nan"), device="cuda")
            out_b = rt.attention(qb[None], kb[None], vb[None], spec, lse=lse_b)
            assert torch.equal(out[cu_q[b]:cu_q[b + 1]].view(torch.int16), out_b[0].view(torch.int16)), b
            lse_alone = lse_b[0].t().contiguous()   # [hq, len] -> the packed [len, hq]
            assert torch.equal(lse[cu_q[b]:cu_q[b + 1]].view(torch.int32), lse_alone.view(torch.int32)), b
        torch.cuda.synchronize()
    ref = _reference(q, k, v, cu_q, cu_kv)
    got = out.double()
    assert torch.isfinite(got).all() and torch.isfinite(lse).all()
    rel = ((got - ref).norm() / ref.norm()).item()
    assert rel <= (0.01 if "qk=fp16" in spec else 0.08), rel


@needs_gpu
def test_varlen_takes_strided_packed_views_and_refuses_bad_offsets(tmp_path):
    gen = torch.Generator().manual_seed(8)
    q, k, v = _packed_inputs(gen)
    spec = SPECS[0]
    cu_q = torch.tensor(_offsets(LENS_Q), dtype=torch.int32, device="cuda")
    cu_kv = torch.tensor(_offsets(LENS_KV), dtype=torch.int32, device="cuda")
    with qattn.Runtime(cache_path=tmp_path / "c.db", tune=False) as rt:
        dense = rt.attention_varlen(q, k, v, cu_q, cu_kv, 130, 130, spec)
        # the same values with padded token rows (stride 2 * h * d) and a head-major k
        q_wide = torch.zeros(q.shape[0], HQ, 2 * D, dtype=q.dtype, device="cuda")
        q_wide[..., :D] = q
        k_heads = k.transpose(0, 1).contiguous().transpose(0, 1)
        strided = rt.attention_varlen(q_wide[..., :D], k_heads, v, cu_q, cu_kv, 130, 130, spec + " varlen")
        assert torch.equal(dense.view(torch.int16), strided.view(torch.int16))
        with pytest.raises(qattn.BadInput, match="accepted: int32"):
            rt.attention_varlen(q, k, v, cu_q.long(), cu_kv, 130, 130, spec)
        with pytest.raises(qattn.BadInput, match="4 entries but cu_seqlens_kv has 3"):
            rt.attention_varlen(q, k, v, cu_q, cu_kv[:3], 130, 130, spec)
        with pytest.raises(qattn.BadInput, match="qattn needs CUDA tensors"):
            rt.attention_varlen(q, k, v, cu_q.cpu(), cu_kv, 130, 130, spec)
        with pytest.raises(qattn.BadInput, match=r"\[total_q, hq\]"):
            rt.attention_varlen(q, k, v, cu_q, cu_kv, 130, 130, spec, lse=torch.empty(1, HQ, q.shape[0], device="cuda"))
        with pytest.raises(qattn.BadInput, match="packed 3-d tensors"):
            rt.attention_varlen(q[None], k, v, cu_q, cu_kv, 130, 130, spec)
