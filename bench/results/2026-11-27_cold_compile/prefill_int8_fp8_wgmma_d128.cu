// qattn generated: prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=k arch=sm_90a | bm64_bn128_w4_s2_wg
#include "qattn/attention/prefill_int8.cuh"
extern "C" __global__ void __launch_bounds__(128)
qattn_prefill_sm90a_qki8wrp_pve4m3chn_of16_d128_smoothk__bm64_bn128_w4_s2_wg(const qattn::AttentionParams p) {
  extern __shared__ __align__(128) char qattn_smem[];
  qattn::prefill_int8::Kernel<qattn::Gran::per_channel, qattn::Fmt::fp16, 128, false, 64, 128, 4, 2, true, qattn::Fmt::fp8e4m3, qattn::Accum::fp32, false, false, false, qattn::Gran::none, false, true>::run(p, qattn_smem);
}
