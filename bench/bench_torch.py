"""torch parts of the prefill benchmark: inputs with outliers, the fp64 reference on a slice, accuracy
metrics and CUDA-event timing. Everything but the timing also runs on CPU (bench/test_bench_utils.py)."""
import math

import torch

SLICE_HEADS = 3      # heads 0, H/2 and H-1 of batch 0
SLICE_ROWS = 256     # query rows spread over the sequence, the last one included
SLICE_TEXT = f"batch 0, {SLICE_HEADS} heads (first, middle, last), {SLICE_ROWS} query rows spread over N, all keys"


def make_inputs(shape, seed, device, dtype=torch.float16):
    """q, k, v as contiguous [B, N, H, d] with the outliers that make quantization hard (SageAttention's
    observations): a per-channel bias on K shared by all tokens, and a few Q channels 10x larger.
    Values are N(0, 1) otherwise: never zeros, never constant."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    size = (shape.batch, shape.n, shape.heads, shape.d)
    q = torch.randn(size, generator=gen, device=device, dtype=torch.float32)
    k = torch.randn(size, generator=gen, device=device, dtype=torch.float32)
    v = torch.randn(size, generator=gen, device=device, dtype=torch.float32)
    k_bias = 4.0 * torch.randn((shape.heads, shape.d), generator=gen, device=device, dtype=torch.float32)
    k += k_bias   # broadcast over batch and tokens
    big = torch.randperm(shape.d, generator=gen, device=device)[:4]
    q[..., big] *= 10.0
    return tuple(t.to(dtype) for t in (q, k, v))


def slice_index(shape):
    heads = sorted({0, shape.heads // 2, shape.heads - 1})
    rows = sorted({round(i * (shape.n - 1) / (SLICE_ROWS - 1)) for i in range(SLICE_ROWS)}) \
        if shape.n > SLICE_ROWS else list(range(shape.n))
    return heads, rows


def reference_slice(q, k, v, shape, softmax_scale=None):
    """fp64 attention of the slice: [heads, rows, d]. Causal is aligned bottom-right (query i sees
    keys j <= i + kv_len - q_len; q_len == kv_len here, so j <= i)."""
    heads, rows = slice_index(shape)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(shape.d)
    row_idx = torch.tensor(rows, device=q.device)
    out = []
    for h in heads:
        qh = q[0, row_idx, h, :].double()           # [rows, d]
        kh = k[0, :, h, :].double()                 # [N, d]
        vh = v[0, :, h, :].double()
        s = (qh @ kh.T) * scale                     # [rows, N]
        if shape.causal:
            keys = torch.arange(shape.n, device=q.device)
            s = s.masked_fill(keys[None, :] > row_idx[:, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out.append(p @ vh)
    return torch.stack(out)


def take_slice(out_bshd, shape):
    heads, rows = slice_index(shape)
    row_idx = torch.tensor(rows, device=out_bshd.device)
    return torch.stack([out_bshd[0, row_idx, h, :] for h in heads]).double()


def accuracy(out_bshd, reference, shape):
    """cosine similarity, relative L2 error and max abs error of out's slice against the fp64 reference.
    A slice with NaN/Inf gets finite=False and None metrics (JSON has no NaN)."""
    got = take_slice(out_bshd, shape).flatten()
    ref = reference.flatten()
    if not bool(torch.isfinite(got).all()):
        return {"cosine": None, "rel_l2": None, "max_abs": None, "finite": False}
    diff = got - ref
    cosine = float(torch.dot(got, ref) / (got.norm() * ref.norm()))
    return {"cosine": cosine, "rel_l2": float(diff.norm() / ref.norm()), "max_abs": float(diff.abs().max()),
            "finite": True}


def _queue_ahead(ms):
    """Keeps the GPU busy for `ms` so that the host enqueues every timed call before the GPU reaches the
    first one: the events then time the kernels, not the Python/ctypes launch gaps."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * 2.0e6))   # cycles at ~2 GHz; a slower clock only waits longer
    return sleep is not None


def time_calls(call, sets, warmup, iters):
    """Median-ready list of per-call times (ms): call(i % sets) for i in range(iters), after `warmup`
    calls, each bracketed by CUDA events on the current stream; rotating inputs keeps L2 from
    serving one set's data to the next call."""
    for i in range(warmup):
        call(i % sets)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    _queue_ahead(min(20.0 + 1.0 * iters, 200.0))
    for i in range(iters):
        starts[i].record(stream)
        call(i % sets)
        ends[i].record(stream)
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def sdpa_call(backend_name, q, k, v, causal):
    """SDPA on [B, N, H, d] tensors through [B, H, N, d] views (no copies), one backend only:
    sdpa_kernel raises instead of falling back when that backend cannot run the shape."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)
    with sdpa_kernel([backend]):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)   # back to [B, N, H, d] for the accuracy slice
