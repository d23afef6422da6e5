// QuantizeRows: fp16/bf16 rows -> int8 (or e4m3: Code) codes in the same [b, h, s, c] index order (Q and K).
// One block owns one tile of tokens of one (b, h): a whole scale group for per_block (Group tokens),
// kRowTileTokens tokens otherwise. Every thread loads all its 16-byte vectors before using any, so the
// tile is read once, from registers, whatever the granularity:
//   per_token:   a row's lanes reduce its abs-max with shuffles; lane 0 writes the row's scale.
//   per_block:   the block reduces the group's abs-max; thread 0 writes the group's scale.
//   per_tensor:  the abs-max comes from amax_scratch[0] (TensorAmax or FinalizeStats ran before).
//   per_channel: the scales come from FinalizeStats (scale.ptr[b*sb + h*sh + c]).
//   per_warp / per_thread (SageAttention2's groups, mapped as generator/quant_plan.hpp describes; Group = 32 for
//                Q, 64 for K): every group lies inside one 64-token tile, so the block reduces each
//                row's abs-max with shuffles, then the group's abs-max over its rows in shared memory,
//                and writes that group scale to EVERY row of the group in the per-token scale array.
//                The attention kernel then runs its per-token path unchanged, which is exact (each row
//                reads its own group's scale, so code * scale is the group-quantized value) and costs
//                what per_token costs: the fewer scale loads that make these granularities faster in
//                SageAttention2 are not taken. Rows past seq_len add nothing to a group's abs-max (a
//                tail group takes the max of its existing rows only); an all-zero group gets scale 0.
// Code = fp8e4m3 (qk=fp8e4m3; p.qmax = 448): the bytes are e4m3 of x' · (448 / amax), rounded to nearest
// even and saturated (dev::e4m3x2, as QuantizeTransposed's fp8 V); the scales are amax / 448.
// Pack4 (qk=int4's packed form; qmax <= 7): codes go out two per byte, element 2i in the low nibble
// of byte i (the mma.sync .s4 operand layout), rows of D/2 bytes: a thread's 8 codes are 4 bytes.
// Smooth subtracts QuantParams::mean (FinalizeStats) before everything. BlockMean (Q smoothing, smooth=q)
// instead subtracts the mean of each 64-row block of the tile, computed here from the loaded rows
// (block_mean.cuh) and written to QuantParams::mean ([b, h, ceil(seq_len / 64), d]); per_tensor then
// reads the abs-max that BlockMeanAmax found for the smoothed rows. Rows in [seq_len, seq_pad) are
// written as code 0 and get no scale. Grid (ceil(seq_pad / tile tokens), heads, batch).
// OnePass (Smooth or per_channel, see head_sync.cuh): the mean and per_channel scales come from the
// head's totals that the blocks gather while holding their tiles, instead of an earlier statistics
// pass; the block of tile 0 stores them. Grid (ceil(seq_pad / tile tokens) * heads * batch), tiles
// taken by ticket.
// Rotate (rotate=hadamard, token-local scales only): after the mean is subtracted, each row goes through
// the signed Hadamard rotation (rotation.cuh; kRotateQ: H S x, kRotateK: H S x / B) before its scale and
// codes are taken; Q's block means are stored rotated too (the attention kernel's ΔS pairs them with the
// rotated K codes). K's smoothing mean stays unrotated: the LSE correction pairs it with the fp16 Q.
// Variable-length input (QuantParams::cu_seqlens; quant_device.cuh's InputRows): (b, h) reads sequence
// b's packed rows, and its own length takes seq_len's place above (rows past it are code 0 with no
// scale and count in no abs-max or mean; block means past it are 0). The grid, y, scales and block
// means keep seq_len's (the longest sequence's) dense layout.
#pragma once

#include "qattn/common/fp8_cvt.cuh"
#include "qattn/quant/block_mean.cuh"
#include "qattn/quant/head_sync.cuh"
#include "qattn/quant/rotation.cuh"

namespace qattn {
namespace quant {

template <Fmt In, int D, Gran G, int Group, bool Smooth, bool Pack4 = false, bool BlockMean = false,
          bool OnePass = false, int Rotate = kRotateNone, Fmt Code = Fmt::int8>
struct QuantizeRows {
  static_assert(Code == Fmt::int8 || (Code == Fmt::fp8e4m3 && !Pack4), "row codes: int8 (or packed int4), or fp8e4m3");
  static_assert(supported_head_dim(D), "head dim must be 64, 128 or 256");
  static constexpr bool kFragment = G == Gran::per_warp || G == Gran::per_thread;   // group scales per row
  static_assert(G == Gran::per_tensor || G == Gran::per_block || G == Gran::per_token ||
                    G == Gran::per_channel || kFragment,
                "row quantizer granularity must be per_tensor, per_block, per_token, per_channel, per_warp "
                "or per_thread");
  static_assert(!kFragment || Group == 32 || Group == 64, "per_warp / per_thread group must be 32 (Q) or 64 (K)");
  static constexpr bool kRotate = Rotate != kRotateNone;
  static_assert(!kRotate || G == Gran::per_block || G == Gran::per_token || kFragment,
                "the rotation takes token-local scales (per_block, per_token, per_warp, per_thread)");
  static constexpr int kFragGroup = kFragment ? Group : 32;   // never 0 in the (dead) code of other grans
  static_assert(G != Gran::per_block || Group == 64 || Group == 128, "per_block group must be 64 or 128");
  static_assert(G != Gran::per_token || Group == 1, "per_token has group 1");
  static_assert(G == Gran::per_block || G == Gran::per_token || kFragment || Group == 0,
                "per_tensor and per_channel have group 0");

  static constexpr int kThreads = quant::kThreads;
  static constexpr int kTileTokens = G == Gran::per_block ? Group : kRowTileTokens;
  static constexpr int kVecPerRow = D / kVecElems;
  static constexpr int kLanesPerRow = lanes_per_row(D);   // > kVecPerRow at d = 96 only (idle lanes)
  static constexpr int kRowsPerSweep = kThreads / kLanesPerRow;
  static constexpr int kSweeps = kTileTokens / kRowsPerSweep;
  static_assert(kTileTokens % kRowsPerSweep == 0, "tile must be a whole number of sweeps");
  static_assert(!kFragment || kTileTokens % 64 == 0, "a tile must hold whole per_warp / per_thread groups");
  // Blocks run in reverse: after a statistics pass, its last chunks (the highest heads and tokens) are
  // still in L2, so the first tiles quantized here read them from there. Except 32 KiB tiles (per_block
  // 128 at d=128, per_block 64 at d=256), which run slower reversed on the H100: tiles above 16 KiB keep
  // the launch order.
  static constexpr bool kReverse = kTileTokens * D * 2 <= 16 * 1024 && !OnePass;
  static_assert(!OnePass || ((Smooth || G == Gran::per_channel) && G != Gran::per_tensor && !BlockMean),
                "one pass gathers head statistics: a smoothing mean or per_channel scales (per_tensor needs "
                "the whole tensor)");
  static constexpr bool kMinMax = G == Gran::per_channel;
  using Sync = HeadSync<D, kMinMax>;
  using Partials = ChannelPartials<In, D, kMinMax>;
  static_assert(!(Smooth && BlockMean), "one smoothing per operand: the mean over all tokens or the block means");
  static_assert(!BlockMean || G != Gran::per_channel, "block means are for Q (token-wise scales)");
  using Means = BlockMeans<In, D, kTileTokens>;
  static constexpr int kMeanSets = BlockMean ? Means::kBlocks : 1;   // means in registers: one per block
  static __device__ __forceinline__ constexpr int mean_set(int j) { return BlockMean ? Means::block_of(j) : 0; }

  static __device__ void run(const QuantParams& p) {
    __shared__ float red[kThreads / 32];
    __shared__ float part[BlockMean ? Means::kPartFloats : 1];
    // per_warp / per_thread: the abs-max of every row of the tile, then of every row's group.
    __shared__ float row_amax[kFragment ? kTileTokens : 1], grp_amax[kFragment ? kTileTokens : 1];
    __shared__ float sync_part[OnePass ? Partials::kSmemFloats : 1];   // tile partials, then the totals
    __shared__ int ticket;
    const int tiles = (p.seq_pad + kTileTokens - 1) / kTileTokens;
    typename Sync::Coord at{static_cast<int>(kReverse ? gridDim.z - 1 - blockIdx.z : blockIdx.z),
                            static_cast<int>(kReverse ? gridDim.y - 1 - blockIdx.y : blockIdx.y),
                            static_cast<int>(kReverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x)};
    if constexpr (OnePass) at = Sync::take_ticket(p, tiles, &ticket);
    const int tile = at.tile, h = at.h, b = at.b;
    const int vec = threadIdx.x % kLanesPerRow, c0 = vec * kVecElems;
    const bool active = kLanesPerRow == kVecPerRow || vec < kVecPerRow;   // this lane has channels
    const int s_first = tile * kTileTokens + static_cast<int>(threadIdx.x) / kLanesPerRow;
    const InputRows rows = input_rows(p, b, h);
    int len = rows.len;   // this sequence's tokens (seq_len when dense)

    uint4 raw[kSweeps];
#pragma unroll
    for (int j = 0; j < kSweeps; ++j) {
      const int s = s_first + j * kRowsPerSweep;
      raw[j] = s < len && active ? load16(rows.at(s, c0))
                             : make_uint4(0u, 0u, 0u, 0u);
    }

    if constexpr (OnePass) {
      Partials acc;
#pragma unroll
      for (int j = 0; j < kSweeps; ++j)
        if (s_first + j * kRowsPerSweep < len) acc.add(unpack8<In>(raw[j]));
      acc.fold(sync_part, [&](int c, float sum, float hi, float lo) { Sync::contribute(p, at, c, sum, hi, lo); });
      Sync::arrive_and_wait(p, at, tiles);
      Sync::totals(p, at, sync_part);
      Sync::publish(p, at, sync_part, Smooth);
      // Read again after the wait, as p.seq_len is (the sync's memory clobbers reload it): a length kept
      // in a register across the wait lets the compiler hoist the row checks, which costs registers
      // (the d 256 one-pass rows spilled).
      len = seq_len_of(p, b);
    }

    float mean[kMeanSets][kVecElems];
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) mean[0][i] = OnePass && Smooth && active ? sync_part[c0 + i] : 0.f;
    if (Smooth && active && !OnePass) {
      const float4* m =
          reinterpret_cast<const float4*>(p.mean + (static_cast<long long>(b) * p.heads + h) * D + c0);
      const float4 lo = m[0], hi = m[1];
      mean[0][0] = lo.x, mean[0][1] = lo.y, mean[0][2] = lo.z, mean[0][3] = lo.w;
      mean[0][4] = hi.x, mean[0][5] = hi.y, mean[0][6] = hi.z, mean[0][7] = hi.w;
    }
    if constexpr (BlockMean) {
      Means::compute(raw, tile, len, mean, part);
      if constexpr (kRotate) {   // the means as the kernel pairs them with rotated K: rotated likewise
        float rotated_means[kMeanSets][kVecElems];
#pragma unroll
        for (int k = 0; k < kMeanSets; ++k) {
#pragma unroll
          for (int i = 0; i < kVecElems; ++i) rotated_means[k][i] = mean[k][i];
          rotate_row<D, Rotate>(rotated_means[k], c0, rotation_sign_bits<D>(c0));
        }
        Means::store(p, b, h, tile, rotated_means);
      } else {
        Means::store(p, b, h, tile, mean);
      }
    }
    // x' of generator/quant_plan.hpp is row(j) - offset(j, i), formed where used from the loaded bytes (forming the
    // rows once as floats and keeping them made ptxas hold all of them: d 256 per_block 128 spilled on
    // sm_80). Rotate: row(j) is the rotated x' (offset 0), rotated once here for the whole pass (8 floats
    // per row held; rotating again at each use would about double the pass's time), and here because
    // every lane of a row takes part in the shuffles.
    Vec8 rotated[kRotate ? kSweeps : 1];
    if constexpr (kRotate) {
      const unsigned signs = rotation_sign_bits<D>(c0);
#pragma unroll
      for (int j = 0; j < kSweeps; ++j) {
        rotated[j] = unpack8<In>(raw[j]);
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) rotated[j].v[i] -= mean[mean_set(j)][i];
        rotate_row<D, Rotate>(rotated[j].v, c0, signs);
      }
    }
    auto row = [&](int j) {
      if constexpr (kRotate) return rotated[j];
      else return unpack8<In>(raw[j]);
    };
    auto offset = [&](int j, int i) { return kRotate ? 0.f : mean[mean_set(j)][i]; };

    float* scale = const_cast<float*>(p.scale.ptr);
    const long long scale_head = b * p.scale.sb + h * p.scale.sh;
    // Multiplier that maps an element to its code: per row, per tile, or per channel.
    float mult_row[kSweeps];
    float mult_chan[kVecElems];
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) mult_chan[i] = 1.f;
    if (kFragment) {
#pragma unroll
      for (int j = 0; j < kSweeps; ++j) {
        const int s = s_first + j * kRowsPerSweep;
        const Vec8 x = row(j);
        float amax = 0.f;
        if (s < len) {
#pragma unroll
          for (int i = 0; i < kVecElems; ++i) amax = fmaxf(amax, fabsf(x.v[i] - offset(j, i)));
        }
        amax = group_max<kLanesPerRow>(amax);
        if (vec == 0) row_amax[s - tile * kTileTokens] = amax;   // 0 for rows past seq_len
      }
      __syncthreads();
      if (threadIdx.x < kTileTokens) {
        const int r = threadIdx.x;
        // (The other granularities never run this branch; they instantiate it as per_warp.)
        const float amax = row_group_max<kFragment ? G : Gran::per_warp, kFragGroup>(row_amax, r);
        grp_amax[r] = amax;
        const int s = tile * kTileTokens + r;
        if (s < len) scale[scale_head + s] = scale_of(amax, p.qmax);   // expanded to every row
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kSweeps; ++j)
        mult_row[j] = code_multiplier(grp_amax[s_first + j * kRowsPerSweep - tile * kTileTokens], p.qmax);
    } else if (G == Gran::per_token || G == Gran::per_block) {
      float tile_amax = 0.f;
#pragma unroll
      for (int j = 0; j < kSweeps; ++j) {
        const int s = s_first + j * kRowsPerSweep;
        const Vec8 x = row(j);
        float amax = 0.f;
        if (s < len) {
#pragma unroll
          for (int i = 0; i < kVecElems; ++i) amax = fmaxf(amax, fabsf(x.v[i] - offset(j, i)));
        }
        if (G == Gran::per_token) {
          amax = group_max<kLanesPerRow>(amax);
          mult_row[j] = code_multiplier(amax, p.qmax);
          if (vec == 0 && s < len) scale[scale_head + s] = scale_of(amax, p.qmax);
        }
        tile_amax = fmaxf(tile_amax, amax);
      }
      if (G == Gran::per_block) {
        tile_amax = block_max<kThreads>(tile_amax, red);
#pragma unroll
        for (int j = 0; j < kSweeps; ++j) mult_row[j] = code_multiplier(tile_amax, p.qmax);
        if (threadIdx.x == 0 && tile * kTileTokens < len)
          scale[scale_head + tile] = scale_of(tile_amax, p.qmax);
      }
    } else if (G == Gran::per_tensor) {
      const float amax = *p.amax_scratch;
#pragma unroll
      for (int j = 0; j < kSweeps; ++j) mult_row[j] = code_multiplier(amax, p.qmax);
      if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0)
        scale[0] = scale_of(amax, p.qmax);
    } else {  // per_channel
#pragma unroll
      for (int j = 0; j < kSweeps; ++j) mult_row[j] = 1.f;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        const int c = c0 + i;
        const float sc = !active  ? 0.f
                         : OnePass ? scale_of(centred_amax(sync_part[D + c], sync_part[2 * D + c], mean[0][i]), p.qmax)
                                   : p.scale.ptr[scale_head + c];
        mult_chan[i] = sc > 0.f ? 1.f / sc : 0.f;
      }
    }

    const int qmax = __float2int_rn(p.qmax);
#pragma unroll
    for (int j = 0; j < kSweeps; ++j) {
      const int s = s_first + j * kRowsPerSweep;
      if (s >= p.seq_pad || !active) continue;
      int code[kVecElems];
      const Vec8 x = row(j);
      if constexpr (Code == Fmt::fp8e4m3) {   // the e4m3 bytes, as int8s whose low 8 bits pack4_s8 keeps
#pragma unroll
        for (int i = 0; i < kVecElems; i += 2) {
          const dev::u32 two = s < len ? dev::e4m3x2((x.v[i] - offset(j, i)) * (mult_row[j] * mult_chan[i]),
                                                     (x.v[i + 1] - offset(j, i + 1)) * (mult_row[j] * mult_chan[i + 1]))
                                       : 0u;
          code[i] = static_cast<signed char>(two & 0xFFu);
          code[i + 1] = static_cast<signed char>(two >> 8);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kVecElems; ++i)
          code[i] = s < len ? to_code(x.v[i] - offset(j, i), mult_row[j] * mult_chan[i], qmax) : 0;
      }
      if constexpr (Pack4) {   // byte c0/2 + i of the row holds codes c0 + 2i (low) and c0 + 2i + 1 (high)
        signed char* dst = static_cast<signed char*>(p.y.ptr) + (b * p.y.sb + h * p.y.sh + s * p.y.ss);
        *reinterpret_cast<unsigned*>(dst + c0 / 2) = pack8_s4(code);
        continue;
      }
      uint2 packed;
      packed.x = pack4_s8(code[0], code[1], code[2], code[3]);
      packed.y = pack4_s8(code[4], code[5], code[6], code[7]);
      *reinterpret_cast<uint2*>(element_ptr<signed char>(p.y, b, h, s, c0)) = packed;
    }
  }
};

}  // namespace quant
}  // namespace qattn
