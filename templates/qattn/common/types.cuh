// Fixed-width integer aliases and register-sized vector types for device code.
// NVRTC compiles templates with no include directory, so <cstdint> and CUDA's vector types are not
// available to us: these few definitions replace them (sizes are fixed on every CUDA target).
#pragma once

namespace qattn::dev {

using i8 = signed char;
using u8 = unsigned char;
using i16 = short;
using u16 = unsigned short;
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;

static_assert(sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8, "unexpected integer sizes");

// 16 bytes: the unit of cp.async, ldmatrix rows and vectorised global stores.
struct alignas(16) U32x4 {
  u32 x, y, z, w;
};
struct alignas(8) U32x2 {
  u32 x, y;
};

// fp16 / bf16 values are stored as their bit patterns; arithmetic happens in fp32 or inside mma.
using half_bits = u16;
using bf16_bits = u16;

}  // namespace qattn::dev
