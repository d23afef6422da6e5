// qattn generated: decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 gqa=4 arch=sm_90a | bm16_bn32_w4_s2
#include "qattn/decode/decode_mma.cuh"
extern "C" __global__ void __launch_bounds__(128)
qattn_decode_sm90a_qkfqchn_pvfqchn_of16_d128_gqa4__bm16_bn32_w4_s2(const qattn::DecodeParams p) {
  extern __shared__ __align__(128) char qattn_smem[];
  qattn::decode::Kernel<qattn::Fmt::flashq, qattn::Gran::per_channel, qattn::Fmt::fp16, 128, false, false, qattn::SoftmaxMode::exact, 16, 32, 4, 2>::run(p, qattn_smem);
}
