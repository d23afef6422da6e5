// qattn generated: prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 arch=sm_90a | bm64_bn128_w4_s2_wg
#include "qattn/attention/prefill_int8.cuh"
struct qattn_config : qattn::prefill_int8::DefaultConfig {
  static constexpr qattn::Gran v_scale = qattn::Gran::per_channel;
  static constexpr qattn::Fmt out = qattn::Fmt::fp16;
  static constexpr int head_dim = 128;
  static constexpr bool causal = false;
  static constexpr int block_m = 64;
  static constexpr int block_n = 128;
  static constexpr int warps = 4;
  static constexpr int stages = 2;
  static constexpr bool wgmma = true;
  static constexpr qattn::Fmt pv = qattn::Fmt::fp8e4m3;
  static constexpr bool k_block_scale = true;
};
extern "C" __global__ void __launch_bounds__(128)
qattn_prefill_sm90a_qki8wrp_pve4m3chn_of16_d128__bm64_bn128_w4_s2_wg(const qattn::AttentionParams p) {
  extern __shared__ __align__(128) char qattn_smem[];
  qattn::prefill_int8::Kernel<qattn_config>::run(p, qattn_smem);
}
