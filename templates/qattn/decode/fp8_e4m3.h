// OCP FP8 e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; max 448, no infinities, 0x7F/0xFF
// NaN) for the fp8e4m3:per_head KV cache: one encoder shared by the host library, the tests and the
// append kernel, so host and device write the same bytes, and the decoder the kernels use.
//
// Encoding is round-to-nearest-even on the float's bits (no library rounding calls, which NVRTC and the
// host would not have to agree on), after clamping |x| to 448: normal results keep the top 3 mantissa
// bits and round on the other 20; results below 2^-6 are multiples of 2^-9, rounded by adding 2^23.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_FP8_FN __host__ __device__ inline
#else
#include <cstring>
#define QATTN_FP8_FN inline
#endif

namespace qattn::fp8 {

QATTN_FP8_FN unsigned float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

QATTN_FP8_FN float bits_float(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

constexpr float kMax = 448.f;
constexpr float kMinNormal = 0.015625f;   // 2^-6

// x (already divided by the head's scale) -> e4m3 code. NaN encodes as 448 (fminf drops it).
QATTN_FP8_FN unsigned char encode_e4m3(float x) {
  const unsigned sign = float_bits(x) >> 31;
  const float a = fminf(bits_float(float_bits(x) & 0x7FFFFFFFu), kMax);
  unsigned code;
  if (a < kMinNormal) {
    // a * 2^9 is exact; adding 2^23 rounds it to an integer, nearest even (0 .. 8; 8 is the smallest
    // normal, code 0x08, so the carry needs no special case).
    const float r = (a * 512.f + 8388608.f) - 8388608.f;
    code = static_cast<unsigned>(r);
  } else {
    const unsigned u = float_bits(a);
    unsigned q = u >> 20;                 // exponent and the top 3 mantissa bits
    const unsigned rem = u & 0xFFFFFu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;   // a carry steps the exponent
    code = q - ((127u - 7u) << 3);
  }
  return static_cast<unsigned char>((sign << 7) | code);
}

// e4m3 code -> its value (exact in float).
QATTN_FP8_FN float decode_e4m3(unsigned char c) {
  const unsigned e = (c >> 3) & 0xFu, m = c & 7u;
  const float mag = e == 0 ? m * 0.001953125f   // m * 2^-9
                           : bits_float(((e + 120u) << 23) | (m << 20));
  return (c & 0x80u) ? -mag : mag;
}

}  // namespace qattn::fp8

#undef QATTN_FP8_FN
