#include "generator/quant_plan.hpp"

#include "generator/template_args.hpp"

namespace qattn::gen {

// The constants and helpers shared with the device passes (qattn/quant/quant_config.h).
using namespace quant;
// "qattn::Fmt::fp16" ...: the template arguments of the passes.
using template_args::fmt_enum;
using template_args::gran_enum;

// "" when the request and problem can be planned, else a one-line reason.
std::string quant_request_error(const QuantRequest& r, const QuantProblem& p) {
  if (r.in != Fmt::fp16 && r.in != Fmt::bf16) return "quantizer input must be fp16 or bf16";
  if (!supported_head_dim(r.d)) return "quantizer head dim must be 64, 96, 128 or 256, got " + std::to_string(r.d);
  if (r.transpose) {
    if (r.gran != Gran::per_channel && r.gran != Gran::per_tensor)
      return "transposed V quantization takes per_channel or per_tensor scales";
    if (p.seq_pad % kVPadTokens != 0)
      return "transposed V needs seq_pad a multiple of " + std::to_string(kVPadTokens) + ", got " +
             std::to_string(p.seq_pad);
  } else if (r.gran != Gran::per_token && r.gran != Gran::per_block && r.gran != Gran::per_tensor &&
             r.gran != Gran::per_channel && r.gran != Gran::per_warp && r.gran != Gran::per_thread) {
    return "row quantization takes per_token, per_block, per_tensor, per_channel, per_warp or per_thread scales";
  }
  if (r.code != Fmt::int8 && r.code != Fmt::fp8e4m3) return "quantizer codes are int8 or fp8e4m3";
  if (r.code == Fmt::fp8e4m3 && r.transpose && r.gran != Gran::per_channel)
    return "fp8e4m3 V^T codes take per_channel scales";
  if (r.code == Fmt::fp8e4m3 && !r.transpose && (r.gran == Gran::per_channel || r.block_mean))
    return "fp8e4m3 rows (qk=fp8e4m3) take token-wise or per_tensor scales and no block means";
  if (r.qmax < 1 || r.qmax > 127) return "quantizer qmax must be in [1, 127], got " + std::to_string(r.qmax);
  if (r.pack4 && (r.transpose || r.qmax > 7 || r.code != Fmt::int8))
    return "packed int4 output (pack4) takes int8 row quantization (no transpose) with qmax <= 7";
  if (r.block_mean && (r.smooth || r.transpose || r.pack4 || r.gran == Gran::per_channel))
    return "block means (Q smoothing) take unpacked row quantization with token-wise or per_tensor scales and no other smoothing";
  if (r.rotate != kRotateNone &&
      ((r.rotate != kRotateQ && r.rotate != kRotateK) || r.transpose || !token_local_gran(r.gran)))
    return "rotation (rotate 1 = Q, 2 = K) takes row quantization with token-local scales (per_token, per_block, "
           "per_warp, per_thread)";
  if (r.rotate != kRotateNone && r.gran == Gran::per_block && r.group != 64)   // 128-token tiles: 16 rows per thread
    return "rotation with per_block takes groups of 64 tokens (the attention specs' group), got " + std::to_string(r.group);
  if (r.gran == Gran::per_block && r.group != 64 && r.group != 128)
    return "per_block group must be 64 or 128, got " + std::to_string(r.group);
  if ((r.gran == Gran::per_warp || r.gran == Gran::per_thread) && r.group != 32 && r.group != 64)
    return std::string(r.gran == Gran::per_warp ? "per_warp" : "per_thread") +
           " group must be 32 (Q mapping) or 64 (K mapping), got " + std::to_string(r.group);
  if (p.batch < 1 || p.heads < 1 || p.seq_len < 1) return "quantizer needs batch, heads and seq_len >= 1";
  if (p.batch > 65535 || p.heads > 65535) return "quantizer grid limit: batch and heads must be <= 65535";
  if (p.seq_pad < p.seq_len) return "seq_pad must be >= seq_len";
  if (p.mean_sample_tokens < 0) return "mean_sample_tokens must be >= 0 (0: every token)";
  return "";
}

// "" when the filled-in parameters meet the passes' pointer, stride and alignment needs (see the top).
std::string quant_params_error(const QuantRequest& r, const QuantParams& q) {
  auto misaligned = [](const void* ptr, unsigned long long n) {
    return reinterpret_cast<unsigned long long>(ptr) % n != 0;
  };
  if (!q.x.ptr || !q.y.ptr || !q.scale.ptr) return "quantizer needs x, y and scale pointers";
  if (q.d != r.d) return "QuantParams::d differs from the request's head dim";
  if (r.code == Fmt::fp8e4m3) {
    if (q.qmax != 448.f) return "fp8e4m3 codes need qmax = 448 (the e4m3 maximum)";
  } else {
    if (q.qmax < 1.f || q.qmax > 127.f || q.qmax != static_cast<float>(static_cast<int>(q.qmax)))
      return "qmax must be an integer in [1, 127]";
    if (q.qmax != static_cast<float>(r.qmax)) return "QuantParams::qmax differs from the request's qmax";
  }
  if (q.x.sc != 1 || misaligned(q.x.ptr, 16) || q.x.sb % 8 || q.x.sh % 8 || q.x.ss % 8)
    return "quantizer input rows must be contiguous and 16-byte aligned (x.sc = 1, strides multiple of 8)";
  if (r.transpose) {
    if (q.y.ss != 1 || misaligned(q.y.ptr, 16) || q.y.sb % 16 || q.y.sh % 16 || q.y.sc % 16)
      return "transposed V output needs y.ss = 1, 16-byte aligned y and y.sb, y.sh, y.sc multiples of 16";
    if (q.y.sc < q.seq_pad) return "transposed V output rows (y.sc) shorter than seq_pad";
  } else if (q.y.sc != 1 || misaligned(q.y.ptr, 8) || q.y.sb % 8 || q.y.sh % 8 || q.y.ss % 8) {
    return "quantized rows need y.sc = 1, 8-byte aligned y and strides multiple of 8";
  } else if (r.pack4 && q.y.ss < r.d / 2) {
    return "packed int4 rows (pack4) need y.ss >= d/2 bytes";
  }
  if ((r.smooth || r.block_mean) && (!q.mean || misaligned(q.mean, 16))) return "smoothing needs a 16-byte aligned mean buffer";
  if ((r.smooth || r.gran == Gran::per_tensor || r.gran == Gran::per_channel) &&
      (!q.amax_scratch || misaligned(q.amax_scratch, 16)))
    return "this quantization needs a 16-byte aligned amax_scratch of plan.scratch_floats floats";
  return "";
}

// Tiles of one head of the quantizer that reads x (rows: per_block tiles are the group).
int quant_tiles_per_head(const QuantRequest& r, const QuantProblem& p) {
  if (r.transpose) return p.seq_pad / kTransposeTileTokens;
  const int tile = r.gran == Gran::per_block ? r.group : kRowTileTokens;
  return (p.seq_pad + tile - 1) / tile;
}

// The smoothing mean from a strided sample of p.mean_sample_tokens tokens (see Mean at the top): the
// scales are then computed from the smoothed rows alone (token-local), so the statistics pass only
// needs a good estimate of the channel bias and reads S rows per head instead of seq_len.
bool quant_samples_mean(const QuantRequest& r, const QuantProblem& p) {
  return r.smooth && token_local_gran(r.gran) && p.mean_sample_tokens > 0 && p.seq_len > p.mean_sample_tokens;
}

// The one-pass form (head_sync.cuh) serves statistics of whole heads (smoothing means, per_channel
// scales; not per_tensor, whose abs-max spans every head) when one head's tiles fit in half of the
// resident blocks: a head's tiles are then all resident while they wait for one another. Not where the
// mean comes from a sample: the quantizer then reads the input once plus a fixed sample, which is what
// one pass would save, without the waiting.
bool quant_one_pass(const QuantRequest& r, const QuantProblem& p) {
  const bool head_stats = (r.smooth || r.gran == Gran::per_channel) && r.gran != Gran::per_tensor &&
                          !quant_samples_mean(r, p);
  const bool words_fit = 1LL * p.batch * p.heads * sync_head_words(r.d) < (1LL << 30);   // zero_scratch_floats is an int
  return head_stats && words_fit && p.resident_blocks > 0 && 2LL * quant_tiles_per_head(r, p) <= p.resident_blocks;
}

// Compact ScaleRef over a buffer of plan.scale_floats floats.
ScaleRef dense_scale_ref(const QuantRequest& r, const QuantProblem& p, const float* ptr) {
  ScaleRef s{ptr, 0, 0, 0, 0};
  long long per_head = 0;
  if (r.gran == Gran::per_token || r.gran == Gran::per_warp || r.gran == Gran::per_thread)
    per_head = p.seq_len, s.group = 1;   // per_warp / per_thread: the group scale expanded to each row
  if (r.gran == Gran::per_block) per_head = (p.seq_len + r.group - 1) / r.group, s.group = r.group;
  if (r.gran == Gran::per_channel) per_head = r.d;
  s.sh = per_head;
  s.sb = per_head * p.heads;
  return s;
}

QuantPlan plan_quant(const QuantRequest& r, const QuantProblem& p) {
  const std::string err = quant_request_error(r, p);
  if (!err.empty()) throw_bad_input(err);

  const std::string d = std::to_string(r.d), in = fmt_enum(r.in), sm = r.smooth ? "true" : "false";
  // QuantizeRows' Pack4 and BlockMean, left out while they are the defaults (false).
  const bool one_pass = quant_one_pass(r, p);
  const bool fragment = r.gran == Gran::per_warp || r.gran == Gran::per_thread;
  // QuantizeRows' Group: the per_block / per_warp / per_thread group, 1 for per_token, else 0.
  const int row_group = r.gran == Gran::per_block || fragment ? r.group : r.gran == Gran::per_token ? 1 : 0;
  // The trailing parameters of QuantizeRows (Pack4, BlockMean, OnePass, Rotate, Code), rendered up to
  // the last one that is not its default (false, false, false, kRotateNone, int8), so the names of
  // existing passes do not change.
  std::string row_flags;
  {
    const std::string args[] = {r.pack4 ? "true" : "false", r.block_mean ? "true" : "false", one_pass ? "true" : "false",
                                std::to_string(r.rotate), fmt_enum(r.code)};
    const bool set[] = {r.pack4, r.block_mean, one_pass, r.rotate != kRotateNone, r.code != Fmt::int8};
    int last = -1;
    for (int i = 0; i < 5; ++i)
      if (set[i]) last = i;
    for (int i = 0; i <= last; ++i) row_flags += ", " + args[i];
  }
  // Statistics passes of a sampled mean carry the sample size S as a template argument (and "_s<S>" in
  // their tag, which names the kernel); a plan without a sample renders the names it always had.
  const int sample = quant_samples_mean(r, p) ? p.mean_sample_tokens : 0;
  const std::string sample_arg = sample ? ", " + std::to_string(sample) : "";
  const std::string sample_tag = sample ? "_s" + std::to_string(sample) : "";
  const unsigned splits = static_cast<unsigned>(stats_splits(stats_tokens(p.seq_len, sample), stats_chunk_tokens(sample)));
  const unsigned heads = static_cast<unsigned>(p.heads), batch = static_cast<unsigned>(p.batch);
  const bool per_tensor = r.gran == Gran::per_tensor;
  const bool needs_stats = r.smooth || r.gran == Gran::per_channel;

  QuantPlan plan;
  if (one_pass) {
    plan.scratch_floats = kSyncOffset + 1LL * sync_head_words(r.d) * p.heads * p.batch;
  } else if (needs_stats) {
    const bool min_max = per_tensor || r.gran == Gran::per_channel;   // an abs-max over whole heads
    plan.launches.push_back({"qattn::quant::ChannelStats<" + in + ", " + d + ", " + (min_max ? "true" : "false") +
                                 sample_arg + ">",
                             "channel_stats" + sample_tag,
                             {splits, heads, batch}, static_cast<unsigned>(kThreads), 0, 0});
    plan.launches.push_back({"qattn::quant::FinalizeStats<" + d + ", " + gran_enum(r.gran) + ", " + sm + sample_arg + ">",
                             "finalize_stats" + sample_tag, {heads, batch, 1}, static_cast<unsigned>(r.d), 0,
                             per_tensor ? 1 : 0});
    plan.scratch_floats = kStatsOffset + 3LL * r.d * splits * p.heads * p.batch;
  } else if (per_tensor && r.block_mean) {
    plan.launches.push_back({"qattn::quant::BlockMeanAmax<" + in + ", " + d + ">", "block_mean_amax",
                             {static_cast<unsigned>((p.seq_len + kRowTileTokens - 1) / kRowTileTokens), heads, batch},
                             static_cast<unsigned>(kThreads), 0, 1});
    plan.scratch_floats = 1;
  } else if (per_tensor) {
    plan.launches.push_back({"qattn::quant::TensorAmax<" + in + ", " + d + ">", "tensor_amax",
                             {splits, heads, batch}, static_cast<unsigned>(kThreads), 0, 1});
    plan.scratch_floats = 1;
  }
  // The quantizing pass. One pass: tiles by ticket over a 1-D grid, its sync words zeroed first.
  const unsigned tiles = static_cast<unsigned>(quant_tiles_per_head(r, p));
  const bool fp8 = r.code == Fmt::fp8e4m3;   // QuantizeTransposed's Code, rendered when not int8 or before OnePass
  const std::string code = fp8 || one_pass ? (fp8 ? ", qattn::Fmt::fp8e4m3" : ", qattn::Fmt::int8") : "";
  QuantLaunch q{r.transpose ? "qattn::quant::QuantizeTransposed<" + in + ", " + d + ", " + gran_enum(r.gran) + ", " + sm +
                                  code + (one_pass ? ", true" : "") + ">"
                            : "qattn::quant::QuantizeRows<" + in + ", " + d + ", " + gran_enum(r.gran) + ", " +
                                  std::to_string(row_group) + ", " + sm + row_flags + ">",
                std::string(r.transpose ? "quantize_transposed" : "quantize_rows") + (one_pass ? "_1p" : ""),
                {tiles, heads, batch}, static_cast<unsigned>(kThreads), 0, 0};
  if (one_pass) {
    q.grid[0] = tiles * heads * batch, q.grid[1] = q.grid[2] = 1;
    q.zero_scratch_floats = static_cast<int>(plan.scratch_floats);
    q.min_blocks = kOnePassMinBlocks;
  }
  plan.launches.push_back(q);
  if (r.smooth) plan.mean_floats = 1LL * p.batch * p.heads * r.d;
  if (r.block_mean) plan.mean_floats = 1LL * p.batch * p.heads * ((p.seq_len + kQMeanBlock - 1) / kQMeanBlock) * r.d;
  const ScaleRef s = dense_scale_ref(r, p, nullptr);
  plan.scale_group = s.group;
  plan.scale_floats = per_tensor ? 1 : s.sb * p.batch;
  return plan;
}

}  // namespace qattn::gen
