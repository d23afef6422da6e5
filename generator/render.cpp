#include "generator/render.hpp"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "generator/template_args.hpp"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/attention/tile_order.h"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/validate.hpp"

namespace qattn::gen {
namespace {

using namespace template_args;

// The grid layout of each prefill kernel (templates/qattn/attention/tile_order.h says why).
tile_order::Order prefill_order(const Spec& spec, const Tiling& tiling) {
  if (!spec.causal) return tile_order::Order::in_order;
  return spec.quantized() && tiling.wgmma ? tile_order::Order::banded : tile_order::Order::by_head;
}

// The template-id of the kernel body that (spec, tiling) instantiates, the header declaring it and the
// type of its one parameter.
struct Body {
  const char* header;
  std::string type;
  const char* params = "qattn::AttentionParams";
  std::string config;   // definitions the type names (the int8 kernel's configuration struct), or empty
};

Body decode_body(const Spec& s, const Tiling& t) {
  std::ostringstream os;
  const bool gemv = s.flow == Dataflow::gemv;
  os << (gemv ? "qattn::decode::GemvKernel<" : "qattn::decode::Kernel<") << fmt_enum(s.qk.fmt) << ", "
     // flashq: the kernel covers the cache's blocks, which are never masked (the new tokens, and so the
     // causal mask, are in its INT8 buffer, decoded by the int8:per_token kernel).
     << gran_enum(s.qk.gran) << ", " << fmt_enum(s.out) << ", " << s.head_dim << ", "
     << flag(s.causal && s.qk.fmt != Fmt::flashq) << ", "
     << flag(s.paged) << ", " << softmax_enum(s.softmax) << ", " << t.block_m << ", " << t.block_n << ", " << t.warps
     << ", " << t.stages << ">";
  return {gemv ? "qattn/decode/decode_gemv.cuh" : "qattn/decode/decode_mma.cuh", os.str(), "qattn::DecodeParams", ""};
}

// The int8 kernel (every quantized Q/K: int4 too) takes one configuration struct
// (templates/qattn/attention/prefill_int8/config.cuh), written here: the required members, then each
// optional one that differs from DefaultConfig's, so that adding an option leaves the sources (and so
// the cache keys) of the kernels that do not use it unchanged.
Body prefill_int8_body(const Spec& s, const Tiling& t) {
  const bool qsmooth = (s.smooth & kSmoothQ) != 0;
  // V smoothing: int8 P·V normalised by the exact sum (see the kernel's "row sum").
  const bool vsmooth = s.pv.fmt == Fmt::int8 && (s.smooth & kSmoothV) != 0;
  // K's scale shared by 64-key groups (per_warp / per_block / per_tensor K), folded into the row factor;
  // in the wgmma form only: in the mma.sync form it costs ptxas 10 more registers at d 64 (138 on
  // sm_80: 3 blocks per SM instead of 4), for a gain not shown on those archs.
  const bool kblock = t.wgmma && !qsmooth &&
                      (s.qk.gran == Gran::per_warp || s.qk.gran == Gran::per_block || s.qk.gran == Gran::per_tensor);
  const auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  std::ostringstream cfg;
  cfg << "struct qattn_config : qattn::prefill_int8::DefaultConfig {\n";
  const auto member = [&](const char* type, const char* name, const std::string& value) {
    cfg << "  static constexpr " << type << " " << name << " = " << value << ";\n";
  };
  member("qattn::Gran", "v_scale", gran_enum(s.pv.gran));
  member("qattn::Fmt", "out", fmt_enum(s.out));
  member("int", "head_dim", std::to_string(s.head_dim));
  member("bool", "causal", b(s.causal));
  member("int", "block_m", std::to_string(t.block_m));
  member("int", "block_n", std::to_string(t.block_n));
  member("int", "warps", std::to_string(t.warps));
  member("int", "stages", std::to_string(t.stages));
  member("bool", "wgmma", b(t.wgmma));
  if (s.pv.fmt != Fmt::int8) member("qattn::Fmt", "pv", fmt_enum(s.pv.fmt));
  if (s.accum != Accum::fp32) member("qattn::Accum", "accum", accum_enum(s.accum));
  if (t.int4_mma) member("bool", "packed_int4", b(true));   // int4 without it: the same codes as int8
  if (qsmooth) member("bool", "q_smooth", b(true));
  if (s.qk.fmt == Fmt::int4) member("bool", "int4_codes", b(true));
  if (s.qk.fmt == Fmt::fp8e4m3) member("bool", "fp8_codes", b(true));
  if (t.q_fused) member("qattn::Gran", "fused_q", gran_enum(s.qk.gran));   // Q's scale groups
  if (vsmooth) member("bool", "v_smooth", b(true));
  if (kblock) member("bool", "k_block_scale", b(true));
  if (t.tma) member("bool", "tma", b(true));
  if (t.warp_specialized) member("bool", "warp_specialized", b(true));
  if (t.persistent) member("bool", "persistent", b(true));
  if (s.varlen) member("bool", "varlen", b(true));
  cfg << "};\n";
  return {"qattn/attention/prefill_int8.cuh", "qattn::prefill_int8::Kernel<qattn_config>", "qattn::AttentionParams",
          cfg.str()};
}

Body attention_body(const Spec& s, const Tiling& t) {
  if (s.phase == Phase::decode) return decode_body(s, t);
  if (s.quantized()) return prefill_int8_body(s, t);   // int8, int4 and fp8e4m3 Q/K
  std::ostringstream tail;
  tail << s.head_dim << ", " << (s.causal ? "true" : "false") << ", " << t.block_m << ", " << t.block_n << ", "
       << t.warps << ", " << t.stages << (s.varlen ? ", true" : "") << ">";
  return {"qattn/attention/prefill_fp16.cuh",
          std::string("qattn::prefill_fp16::Kernel<") + fmt_enum(s.qk.fmt) + ", " + tail.str(), "qattn::AttentionParams", ""};
}

// A linear layer's kernel (templates/qattn/linear/): one template per dataflow, the same parameters.
Source render_linear(const Spec& s, const Tiling& t) {
  const char* body = s.flow == Dataflow::gemv ? "Gemv" : s.flow == Dataflow::flat ? "FlatGemm" : "Gemm";
  Source src;
  src.kernel_name = kernel_name(s, t);
  src.arch = s.arch;
  std::ostringstream os;
  os << "// qattn generated: " << to_string(s) << " | " << to_string(t) << "\n"
     << "#include \"qattn/linear/linear.cuh\"\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << block_threads(t) << ")\n"
     << src.kernel_name << "(const qattn::LinearParams p) {\n"
     << "  extern __shared__ __align__(128) char qattn_smem[];\n"
     << "  qattn::linear::" << body << "<" << fmt_enum(s.act) << ", " << fmt_enum(s.weight.fmt) << ", " << fmt_enum(s.out) << ", "
     << s.n << ", " << s.k << ", " << flag(s.bias) << ", " << t.block_m << ", " << t.block_n << ", " << t.warps << ", "
     << t.stages << (s.flow == Dataflow::gemm ? std::string(", ") + flag(t.wgmma) : std::string()) << ">::run(p, qattn_smem);\n"
     << "}\n";
  src.text = os.str();
  return src;
}

}  // namespace

Source render_kernel(const Spec& spec, const Tiling& tiling) {
  require(validate(spec, tiling, default_limits(spec.arch)));
  if (spec.phase == Phase::linear) return render_linear(spec, tiling);
  Source src;
  src.kernel_name = kernel_name(spec, tiling);
  src.arch = spec.arch;
  const Body body = attention_body(spec, tiling);
  const int min_blocks = tiling.warp_specialized ? prefill_int8::ws_blocks_per_sm(tiling.warps) : tiling.min_blocks;
  std::ostringstream os;
  os << "// qattn generated: " << to_string(spec) << " | " << to_string(tiling) << "\n"
     << "#include \"" << body.header << "\"\n"
     << body.config
     // Minimum blocks only when the tiling asks (_mb<k>): a hint of 1 would let ptxas spend registers
     // for one block per SM, costing the int8 wgmma kernel a resident block.
     // The warp-specialized form fixes its blocks per SM: the producer's registers go to the consumers.
     << "extern \"C\" __global__ void __launch_bounds__(" << block_threads(tiling)
     << (min_blocks > 0 ? ", " + std::to_string(min_blocks) : std::string()) << ")\n"
     // _tma: the tensor maps are read by the TMA unit from parameter space, so the parameter is
     // __grid_constant__ (never copied to local memory).
     << src.kernel_name << "(const " << (tiling.tma ? "__grid_constant__ qattn::TmaAttentionParams" : body.params)
     << " p) {\n"
     << "  extern __shared__ __align__(128) char qattn_smem[];\n"
     << "  " << body.type << (tiling.warp_specialized ? "::run_ws(p, qattn_smem);\n"
                              : tiling.tma             ? "::run_tma(p, qattn_smem);\n"
                                                       : "::run(p, qattn_smem);\n")
     << "}\n";
  src.text = os.str();
  return src;
}

LaunchShape decode_launch(const Spec& spec, const Tiling& tiling, const Problem& p, int splits) {
  LaunchShape l;
  const int rows = spec.gqa * p.q_len;
  l.grid[0] = static_cast<unsigned>(splits);
  l.grid[1] = static_cast<unsigned>(p.heads_kv * ((rows + tiling.block_m - 1) / tiling.block_m));
  l.grid[2] = static_cast<unsigned>(p.batch);
  l.block = static_cast<unsigned>(tiling.warps * 32);
  l.smem_bytes = static_cast<unsigned>(kernel_smem_bytes(spec, tiling));
  return l;
}

LaunchShape linear_launch(const Spec& spec, const Tiling& tiling, int m, int splits) {
  LaunchShape l;
  l.grid[0] = static_cast<unsigned>((spec.n + tiling.block_n - 1) / tiling.block_n);
  l.grid[1] = static_cast<unsigned>((m + tiling.block_m - 1) / tiling.block_m);
  l.grid[2] = static_cast<unsigned>(splits);
  l.block = static_cast<unsigned>(block_threads(tiling));
  l.smem_bytes = static_cast<unsigned>(kernel_smem_bytes(spec, tiling));
  return l;
}

LaunchShape attention_launch(const Spec& spec, const Tiling& tiling, const Problem& p, int band_heads, int ctas) {
  LaunchShape l;
  const tile_order::Grid g =
      tile_order::grid(prefill_order(spec, tiling), (p.q_len + tiling.block_m - 1) / tiling.block_m, p.heads_q, p.batch, band_heads);
  l.grid[0] = g.x;
  l.grid[1] = g.y;
  l.grid[2] = g.z;
  if (tiling.persistent) {   // the CTAs loop over that grid's units (tile_order::unit_slot)
    const long long units = tile_order::unit_count(g);
    l.grid[0] = static_cast<unsigned>(ctas > 0 && ctas < units ? ctas : std::min<long long>(units, kMaxPersistentUnits));
    l.grid[1] = l.grid[2] = 1;
  }
  l.block = static_cast<unsigned>(block_threads(tiling));
  l.smem_bytes = static_cast<unsigned>(kernel_smem_bytes(spec, tiling));
  return l;
}

Verdict grid_fits(const Spec& spec, const Tiling& tiling, const Problem& p) {
  if (spec.phase == Phase::prefill && tiling.persistent) {
    const long long units = tile_order::unit_count(
        tile_order::grid(prefill_order(spec, tiling), (p.q_len + tiling.block_m - 1) / tiling.block_m, p.heads_q, p.batch, 1));
    if (units <= kMaxPersistentUnits) return Verdict::yes();
    return Verdict::no("shape " + to_string(p) + ": tiling " + to_string(tiling) + " loops over " + std::to_string(units) +
                       " query tiles (batch x heads x q / bm); the persistent form counts at most " +
                       std::to_string(kMaxPersistentUnits) + " (drop _ps)");
  }
  const LaunchShape l = spec.phase == Phase::decode ? decode_launch(spec, tiling, p, 1) : attention_launch(spec, tiling, p);
  if (l.grid[1] <= tile_order::kMaxGridYz && l.grid[2] <= tile_order::kMaxGridYz) return Verdict::yes();
  const std::string grid = "(" + std::to_string(l.grid[0]) + ", " + std::to_string(l.grid[1]) + ", " +
                           std::to_string(l.grid[2]) + ")";
  if (spec.phase == Phase::prefill && prefill_order(spec, tiling) == tile_order::Order::banded)
    return Verdict::no("shape " + to_string(p) + ": tiling " + to_string(tiling) + " launches a grid of " + grid +
                       " CTAs, and CUDA allows 65535 in y, where the causal wgmma form puts the query tiles; "
                       "accepted with it: q <= " + std::to_string(static_cast<long long>(tile_order::kMaxGridYz) * tiling.block_m) +
                       " (the mma.sync form, a tiling without _wg, takes any q)");
  return Verdict::no("shape " + to_string(p) + ": tiling " + to_string(tiling) + " launches a grid of " + grid +
                     " CTAs; CUDA allows at most 65535 in y and z");
}

int attention_band_heads(const Spec& spec, const Tiling& tiling, const Problem& p, long long l2_bytes) {
  const long long heads = static_cast<long long>(p.batch) * p.heads_q;
  if (prefill_order(spec, tiling) != tile_order::Order::banded || l2_bytes <= 0 || heads <= 1) return 1;
  // Bytes per element as the wgmma form reads them: K one byte (int4 specs run there on int8 codes), V one
  // byte as int8 or fp8, else two.
  const long long k_bytes = 1;
  const long long v_bytes = spec.pv.fmt == Fmt::int8 || spec.pv.fmt == Fmt::fp8e4m3 ? 1 : 2;
  const long long per_kv_head = std::max(1LL, static_cast<long long>(p.kv_len) * spec.head_dim * (k_bytes + v_bytes));
  // Half of L2: the other half streams Q and O, and the tiles of the band before and after.
  const long long kv_heads = std::max(1LL, l2_bytes / 2 / per_kv_head);
  const long long width = std::min(heads, kv_heads * std::max(1, p.heads_q / std::max(1, p.heads_kv)));
  return tile_order::band_width(static_cast<int>(heads), static_cast<int>(width));
}

}  // namespace qattn::gen
