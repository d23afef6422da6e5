// FinalizeStats: folds ChannelStats' per-chunk statistics of one (b, h) into
//   - the channel mean (written to QuantParams::mean when Smooth): over the tokens ChannelStats visited,
//     every token, or with SampleTokens > 0 (the same as ChannelStats') its sample of
//     stats_tokens(seq_len, SampleTokens) tokens,
//   - per_channel: the channel scale amax_c / qmax,
//   - per_tensor:  the abs-max of the (smoothed) head, atomically maxed into amax_scratch[0].
// Grid (heads, batch), one thread per channel. Reads only the small statistics, never the tensor.
// Variable-length input (QuantParams::cu_seqlens): the chunks are laid out for seq_len (ChannelStats),
// and the mean of (b, h) is over sequence b's own tokens, or its sample stats_tokens(len_b, S).
//
// The smoothed abs-max of a channel is max(max_c - mean_c, mean_c - min_c): the same fp32 value as the
// largest |x - mean_c| the quantize pass computes element by element (fp32 subtraction is monotonic),
// so that element lands exactly on +-qmax.
#pragma once

#include "qattn/quant/head_sync.cuh"

namespace qattn {
namespace quant {

template <int D, Gran G, bool Smooth, int SampleTokens = 0>
struct FinalizeStats {
  static_assert(supported_head_dim(D), "head dim must be 64, 128 or 256");
  static_assert(Smooth || G == Gran::per_tensor || G == Gran::per_channel,
                "finalize without smoothing only serves per_tensor or per_channel scales");
  static constexpr int kThreads = D;
  static constexpr bool kNeedsAmax = G == Gran::per_tensor || G == Gran::per_channel;
  static_assert(SampleTokens >= 0 && (SampleTokens == 0 || (Smooth && !kNeedsAmax)),
                "a sample serves the smoothing mean of token-local scales only (an abs-max needs every token)");

  static __device__ void run(const QuantParams& p) {
    __shared__ float red[kThreads / 32];
    const int h = blockIdx.x, b = blockIdx.y, c = threadIdx.x;
    const int tokens = stats_tokens(seq_len_of(p, b), SampleTokens);   // the divisor of the mean
    const int splits = stats_splits(stats_tokens(p.seq_len, SampleTokens), stats_chunk_tokens(SampleTokens));
    const float* st = stats_base(p) + stats_index(p, b, h, 0, splits, D);
    const float inf = __int_as_float(0x7f800000);
    float sum = 0.f, hi = -inf, lo = inf;
    // ChannelStats wrote max and min only when this granularity needs an abs-max (kNeedsAmax).
    for (int i = 0; i < splits; ++i, st += 3 * D) {
      sum += st[c];
      if (kNeedsAmax) {
        hi = fmaxf(hi, st[D + c]);
        lo = fminf(lo, st[2 * D + c]);
      }
    }
    const float mean = tokens > 0 ? sum / static_cast<float>(tokens) : 0.f;
    if (Smooth) p.mean[(static_cast<long long>(b) * p.heads + h) * D + c] = mean;
    const float center = Smooth ? mean : 0.f;
    float amax = centred_amax(hi, lo, center);
    if (G == Gran::per_channel) {
      float* scale = const_cast<float*>(p.scale.ptr);
      scale[b * p.scale.sb + h * p.scale.sh + c] = scale_of(amax, p.qmax);
    }
    if (G == Gran::per_tensor) {
      amax = block_max<kThreads>(amax, red);
      if (c == 0) atomic_max_nonneg(p.amax_scratch, amax);
    }
  }
};

}  // namespace quant
}  // namespace qattn
