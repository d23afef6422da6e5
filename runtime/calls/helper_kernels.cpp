#include "runtime/calls/helper_kernels.hpp"

#include <set>

#include "qattn/validate.hpp"

namespace qattn::rt {

std::array<int, 3> pass_lanes(const std::array<QuantSlot, 3>& slots, bool concurrent) {
  std::array<int, 3> lane{-1, -1, -1};
  if (!concurrent || !slots[2].active || !(slots[0].active || slots[1].active)) return lane;
  lane[2] = 0;
  if (slots[0].active && slots[1].active) lane[0] = 1;
  return lane;
}

std::array<QuantSlot, 3> quant_slots(const Spec& spec, const Problem& p, bool int4_mma, int resident_blocks,
                                     int k_mean_sample_tokens, bool q_fused, bool tma) {
  const int d = spec.head_dim;
  // per_warp / per_thread: the Q mapping (group 32) and the K mapping (group 64) of generator/quant_plan.hpp; the
  // scales come out expanded per row, so the attention kernel runs its per-token path.
  const bool fragment = spec.qk.gran == Gran::per_warp || spec.qk.gran == Gran::per_thread;
  const int q_group = spec.qk.gran == Gran::per_block ? 64 : fragment ? 32 : 0;
  const int k_group = spec.qk.gran == Gran::per_block || fragment ? 64 : 0;
  const int kv_pad = (p.kv_len + kVPadTokens - 1) / kVPadTokens * kVPadTokens;
  std::array<QuantSlot, 3> slots;
  slots[0].request = {spec.out, spec.qk.gran, q_group, false, false, d};
  slots[0].request.block_mean = (spec.smooth & kSmoothQ) != 0;   // Q smoothing: 64-row block means
  slots[0].problem = {p.batch, p.heads_q, p.q_len, p.q_len};
  slots[1].request = {spec.out, spec.qk.gran, k_group, (spec.smooth & kSmoothK) != 0, false, d};
  slots[1].problem = {p.batch, p.heads_kv, p.kv_len, tma ? (p.kv_len + 15) / 16 * 16 : p.kv_len};
  slots[1].problem.mean_sample_tokens = k_mean_sample_tokens;   // K's smoothing mean may come from a sample
  slots[2].request = {spec.out, spec.pv.gran, 0, (spec.smooth & kSmoothV) != 0, true, d};
  slots[2].request.code = spec.pv.fmt == Fmt::fp8e4m3 ? Fmt::fp8e4m3 : Fmt::int8;
  slots[2].problem = {p.batch, p.heads_kv, p.kv_len, kv_pad};
  slots[2].active = spec.pv.fmt != Fmt::fp16;   // pv=fp16: the kernel reads V as given
  slots[0].active = !q_fused;                     // _qf: the kernel quantizes Q as given
  if (spec.rotate == Rotation::hadamard) slots[0].request.rotate = quant::kRotateQ, slots[1].request.rotate = quant::kRotateK;
  if (spec.qk.fmt == Fmt::fp8e4m3) slots[0].request.code = slots[1].request.code = Fmt::fp8e4m3;
  if (spec.qk.fmt == Fmt::int4)
    for (int i : {0, 1}) {
      slots[static_cast<size_t>(i)].request.qmax = 7;
      slots[static_cast<size_t>(i)].request.pack4 = int4_mma;
    }
  for (QuantSlot& s : slots) {
    s.problem.resident_blocks = resident_blocks;
    if (s.active) s.plan = gen::plan_quant(s.request, s.problem);
  }
  return slots;
}

std::vector<gen::Source> helper_sources(const Spec& spec, int k_mean_sample_tokens) {
  std::vector<gen::Source> out;
  if (spec.phase == Phase::decode && spec.qk.fmt == Fmt::flashq) {
    // The flashq cache's pack kernels (they write its INT8 buffer too; append_kv has no flashq form)
    // and the combine.
    out = gen::render_flashq_kernels(spec);
    out.push_back(gen::render_decode_combine(spec));
    return out;
  }
  if (spec.phase == Phase::decode) {   // a cache's kernels: the combine, the append, the gather (prefill over it)
    out = {gen::render_decode_combine(spec), gen::render_kv_append(spec), gen::render_kv_gather(spec)};
    if (spec.qk.fmt != Fmt::fp16 && spec.qk.fmt != Fmt::bf16)   // and K smoothing's two kernels
      for (const char* op : {"mean", "lsefix"}) out.push_back(gen::render_kv_smooth(spec, op));
    return out;
  }
  if (!spec.quantized()) return out;
  // Statistics passes where a head needs them, over every token (a sequence longer than one wave holds),
  // the one-pass form (a short one), and K's statistics over a sample where the sequence is longer than it.
  const Problem nominal{1, spec.gqa, 1, 128, 128};
  const bool int4_mma = int4_mma_by_default(spec);
  for (const QuantSlot& s : quant_slots(spec, nominal, int4_mma, 0, k_mean_sample_tokens))
    for (const gen::QuantLaunch& l : s.plan.launches) out.push_back(gen::render_quant_pass(s.request, l, spec.arch));
  std::set<std::string> names;
  for (const gen::Source& src : out) names.insert(src.kernel_name);
  auto add_new = [&](const QuantSlot& s) {
    if (!s.active) return;
    for (const gen::QuantLaunch& l : s.plan.launches) {
      gen::Source src = gen::render_quant_pass(s.request, l, spec.arch);
      if (names.insert(src.kernel_name).second) out.push_back(std::move(src));
    }
  };
  // The one-pass form short calls take (rt::one_pass_fits: every tile of an operand in one wave).
  for (const QuantSlot& s : quant_slots(spec, nominal, int4_mma, 1 << 20, k_mean_sample_tokens)) add_new(s);
  if (k_mean_sample_tokens > 0) {   // K's passes that only a longer sequence adds (the sampled statistics)
    const Problem beyond_sample{1, spec.gqa, 1, 1, k_mean_sample_tokens + 1};
    add_new(quant_slots(spec, beyond_sample, int4_mma, 0, k_mean_sample_tokens)[1]);
  }
  if (spec.smooth & kSmoothK) {
    out.push_back(gen::render_lse_rowdot(spec));
    out.push_back(gen::render_lse_addscaled(spec.arch));
  }
  return out;
}

}  // namespace qattn::rt
