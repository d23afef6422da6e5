// QuantizeTransposed: V [b, h, s, c] fp16/bf16 -> int8 V^T per head, y element (b, h, s, c) at
// b*y.sb + h*y.sh + s + c*y.sc (y.ss must be 1), token axis zero-padded up to seq_pad.
// Scales: per_channel (FinalizeStats wrote scale.ptr[b*sb + h*sh + c]) or per_tensor (abs-max in
// amax_scratch[0]; block 0 writes scale.ptr[0]). Smooth subtracts QuantParams::mean first.
//
// One block owns kTransposeTileTokens (128) tokens of one (b, h). Loads are row-wise and coalesced; each
// thread takes 4 consecutive tokens x 8 channels, so for each channel it packs the 4 token codes into one
// 32-bit word and stores it to the transposed tile in shared memory. Stores out are 16-byte, each channel
// row of the tile being 128 contiguous bytes. The tile's 16-byte chunks are XOR-swizzled by channel so
// the word stores of a warp (8 channels apart per lane) spread over the banks, while the 16-byte reads
// stay whole chunks. Grid (seq_pad / 128, heads, batch).
// OnePass (Smooth or per_channel, see head_sync.cuh): the mean and scales come from the head's totals,
// gathered while the blocks hold their tiles, instead of a statistics pass; the block of tile 0 stores
// them. Grid (seq_pad / 128 * heads * batch), tiles taken by ticket.
// Variable-length input (QuantParams::cu_seqlens; quant_device.cuh's InputRows): (b, h) reads sequence
// b's packed rows; columns past its own length are 0 and count in no statistic. y keeps seq_pad.
#pragma once

#include "qattn/common/fp8_cvt.cuh"
#include "qattn/quant/head_sync.cuh"

namespace qattn {
namespace quant {

// Code = fp8e4m3 (pv=fp8e4m3, per_channel only): the bytes are e4m3 of x' · (448 / amax_c), rounded to
// nearest even and saturated at 448 (dev::e4m3x2: the sm_89+ instruction, the same rounding as the
// shared encoder of qattn/decode/fp8_e4m3.h); p.qmax = 448.
template <Fmt In, int D, Gran G, bool Smooth, Fmt Code = Fmt::int8, bool OnePass = false>
struct QuantizeTransposed {
  static_assert(Code == Fmt::int8 || (Code == Fmt::fp8e4m3 && G == Gran::per_channel),
                "transposed V codes: int8, or fp8e4m3 with per_channel scales");
  static_assert(supported_head_dim(D), "head dim must be 64, 128 or 256");
  static_assert(G == Gran::per_channel || G == Gran::per_tensor,
                "transposed V takes per_channel or per_tensor scales (a token scale would sit on the "
                "reduction axis of P.V)");

  static constexpr int kThreads = quant::kThreads;
  static constexpr int kTileTokens = kTransposeTileTokens;
  static constexpr int kVecPerRow = D / kVecElems;
  static constexpr int kLanesPerRow = lanes_per_row(D);   // > kVecPerRow at d = 96 only (idle lanes)
  static constexpr int kQuadsPerSweep = kThreads / kLanesPerRow;
  static constexpr int kSweeps = kTileTokens / 4 / kQuadsPerSweep;
  static constexpr int kChunksPerRow = kTileTokens / 16;   // 16-byte chunks of one channel row
  static_assert(kSweeps * kQuadsPerSweep * 4 == kTileTokens, "tile must be a whole number of sweeps");
  static_assert(kChunksPerRow == 8, "the swizzle assumes 8 chunks (128 bytes) per channel row");
  static_assert((D * kChunksPerRow) % kThreads == 0, "store loop assumes whole rounds");

  static_assert(!OnePass || G == Gran::per_channel, "one pass gathers head statistics: per_channel scales");
  using Sync = HeadSync<D, true>;
  using Partials = ChannelPartials<In, D, true>;
  static constexpr int kTileBytes = D * kChunksPerRow * 16;
  static constexpr int kSmemBytes =
      OnePass && Partials::kSmemFloats * 4 > kTileBytes ? Partials::kSmemFloats * 4 : kTileBytes;

  static __device__ __forceinline__ int swizzle(int c) { return (c >> 3) & 7; }

  static __device__ void run(const QuantParams& p) {
    // The transposed tile, and before it (one pass) the tile partials and then the head totals: one
    // buffer, so that d = 256 stays within 48 KiB of static shared memory.
    __shared__ uint4 smem[kSmemBytes / 16];
    uint4 (*tile_t)[kChunksPerRow] = reinterpret_cast<uint4 (*)[kChunksPerRow]>(smem);
    float* sync_part = reinterpret_cast<float*>(smem);
    __shared__ int ticket;
    const int tiles = p.seq_pad / kTileTokens;
    // Blocks run in reverse: after a statistics pass, its last chunks (the highest heads and tokens)
    // are still in L2, so the first tiles quantized here read them from there instead of DRAM.
    typename Sync::Coord at{static_cast<int>(gridDim.z - 1 - blockIdx.z), static_cast<int>(gridDim.y - 1 - blockIdx.y),
                            static_cast<int>(gridDim.x - 1 - blockIdx.x)};
    if constexpr (OnePass) at = Sync::take_ticket(p, tiles, &ticket);
    const int tile = at.tile, h = at.h, b = at.b;
    const int vec = threadIdx.x % kLanesPerRow, c0 = vec * kVecElems;
    const bool active = kLanesPerRow == kVecPerRow || vec < kVecPerRow;   // this lane has channels
    const int quad0 = threadIdx.x / kLanesPerRow;
    const int s_tile = tile * kTileTokens;
    const InputRows rows = input_rows(p, b, h);
    int len = rows.len;   // this sequence's tokens (seq_len when dense)

    uint4 raw[kSweeps][4];
#pragma unroll
    for (int j = 0; j < kSweeps; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int s = s_tile + 4 * (quad0 + j * kQuadsPerSweep) + r;
        raw[j][r] = s < len && active ? load16(rows.at(s, c0))
                                  : make_uint4(0u, 0u, 0u, 0u);
      }
    }

    if constexpr (OnePass) {
      Partials acc;
#pragma unroll
      for (int j = 0; j < kSweeps; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          if (s_tile + 4 * (quad0 + j * kQuadsPerSweep) + r < len) acc.add(unpack8<In>(raw[j][r]));
      acc.fold(sync_part, [&](int c, float sum, float hi, float lo) { Sync::contribute(p, at, c, sum, hi, lo); });
      Sync::arrive_and_wait(p, at, tiles);
      Sync::totals(p, at, sync_part);
      Sync::publish(p, at, sync_part, Smooth);
      // Read again after the wait, as p.seq_len is (the sync's memory clobbers reload it): a length kept
      // in a register across the wait lets the compiler hoist the row checks, which costs registers
      // (the d 256 one-pass rows spilled).
      len = seq_len_of(p, b);
    }

    float mean[kVecElems], mult[kVecElems];
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) mean[i] = OnePass && Smooth && active ? sync_part[c0 + i] : 0.f;
    if (Smooth && active && !OnePass) {
      const float4* m =
          reinterpret_cast<const float4*>(p.mean + (static_cast<long long>(b) * p.heads + h) * D + c0);
      const float4 lo = m[0], hi = m[1];
      mean[0] = lo.x, mean[1] = lo.y, mean[2] = lo.z, mean[3] = lo.w;
      mean[4] = hi.x, mean[5] = hi.y, mean[6] = hi.z, mean[7] = hi.w;
    }
    if (G == Gran::per_channel) {
      const float* scale = p.scale.ptr + b * p.scale.sb + h * p.scale.sh + c0;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        const int c = c0 + i;
        const float sc = !active  ? 0.f
                         : OnePass ? scale_of(centred_amax(sync_part[D + c], sync_part[2 * D + c], mean[i]), p.qmax)
                                   : scale[i];
        mult[i] = sc > 0.f ? 1.f / sc : 0.f;
      }
    } else {
      const float amax = *p.amax_scratch;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) mult[i] = code_multiplier(amax, p.qmax);
      if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0)
        const_cast<float*>(p.scale.ptr)[0] = scale_of(amax, p.qmax);
    }

    if (OnePass) __syncthreads();   // the totals are read: the buffer becomes the tile
    const int qmax = __float2int_rn(p.qmax);
    unsigned* words = reinterpret_cast<unsigned*>(&tile_t[0][0]);
#pragma unroll
    for (int j = 0; j < kSweeps; ++j) {
      if (!active) break;
      const int quad = quad0 + j * kQuadsPerSweep;
      int code[4][kVecElems];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const bool valid = s_tile + 4 * quad + r < len;
        const Vec8 x = unpack8<In>(raw[j][r]);
        if constexpr (Code == Fmt::fp8e4m3) {   // the bytes, as int8s whose low 8 bits pack4_s8 keeps
#pragma unroll
          for (int i = 0; i < kVecElems; i += 2) {
            const dev::u32 two = valid ? dev::e4m3x2((x.v[i] - mean[i]) * mult[i], (x.v[i + 1] - mean[i + 1]) * mult[i + 1]) : 0u;
            code[r][i] = static_cast<signed char>(two & 0xFFu);
            code[r][i + 1] = static_cast<signed char>(two >> 8);
          }
        } else {
#pragma unroll
          for (int i = 0; i < kVecElems; ++i) code[r][i] = valid ? to_code(x.v[i] - mean[i], mult[i], qmax) : 0;
        }
      }
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        const int c = c0 + i;
        const int chunk = (quad / 4) ^ swizzle(c);
        words[c * kChunksPerRow * 4 + chunk * 4 + quad % 4] =
            pack4_s8(code[0][i], code[1][i], code[2][i], code[3][i]);
      }
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < D * kChunksPerRow / kThreads; ++k) {
      const int id = threadIdx.x + k * kThreads;
      const int c = id / kChunksPerRow, chunk = id % kChunksPerRow;
      *reinterpret_cast<uint4*>(element_ptr<signed char>(p.y, b, h, s_tile + 16 * chunk, c)) =
          tile_t[c][chunk ^ swizzle(c)];
    }
  }
};

}  // namespace quant
}  // namespace qattn
