"""SageAttention2's Hopper kernel (INT8 Q·Kᵀ per-warp, FP8 P·V, two-level fp32 accumulation) as a peer in
the prefill benchmark: the same inputs, the same run, two ways.

- kernel: its own quantization functions run once per input set, untimed; only the attention kernel
  (`sm90_compile.qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf`) is timed, like qattn's kernel rows;
- e2e: `sageattn_qk_int8_pv_fp8_cuda_sm90` from fp16 [B, N, H, d] inputs.

The package is built from ../shared/peers/sageattention on the GPU machine (bench/build_sage.sh) and put on
PYTHONPATH; when it cannot be imported the rows carry that error and the rest of the run goes on.
"""
import torch

QK_GRAN = {"per_warp": 2, "per_thread": 3}   # the kernel's granularity codes
NHD = 0                                      # its tensor_layout code of [B, N, H, d]


def import_error():
    """None when sageattention's sm90 kernel can be imported, else why not (one line)."""
    try:
        import sageattention  # noqa: F401
        from sageattention import sm90_compile  # noqa: F401
        return None
    except Exception as e:   # noqa: BLE001 — any import failure is reported in the rows
        return f"sageattention is not importable ({type(e).__name__}: {e}); build it with bench/build_sage.sh"


class KernelOnly:
    """Quantized inputs of one set, prepared once; run() launches the attention kernel alone."""

    def __init__(self, q, k, v, causal, gran="per_warp"):
        from sageattention.quant import per_channel_fp8, per_warp_int8
        from sageattention.triton.quant_per_thread import per_thread_int8
        self.causal = causal
        self.gran = gran
        self.scale = q.size(-1) ** -0.5
        km = k.mean(dim=1, keepdim=True)   # K smoothing: softmax-invariant, so O needs no correction
        quantize = per_warp_int8 if gran == "per_warp" else per_thread_int8
        extra = {} if gran == "per_warp" else {"WARPK": 128}
        self.q8, self.qs, self.k8, self.ks = quantize(q, k, km, tensor_layout="NHD", BLKQ=64, WARPQ=16, BLKK=128,
                                                      **extra)
        pad = (-v.size(1)) % 128          # the kernel reads V in whole 128-token tiles
        if pad:
            v = torch.cat([v, v.new_zeros(v.size(0), pad, v.size(2), v.size(3))], dim=1)
        self.v8, self.vs, _ = per_channel_fp8(v, tensor_layout="NHD", smooth_v=False)
        self.shape = q.shape
        self.dtype = q.dtype

    def run(self, out):
        from sageattention import sm90_compile
        sm90_compile.qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf(
            self.q8, self.k8, self.v8, out, self.qs, self.ks, self.vs, NHD, int(self.causal), QK_GRAN[self.gran],
            self.scale, 0)
        return out


def end_to_end(q, k, v, causal, gran="per_warp"):
    from sageattention import sageattn_qk_int8_pv_fp8_cuda_sm90
    return sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="NHD", is_causal=causal, qk_quant_gran=gran,
                                             pv_accum_dtype="fp32+fp32")
