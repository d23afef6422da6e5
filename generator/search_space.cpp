#include "generator/search_space.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include "qattn/attention/prefill_fp16_shape.h"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "generator/render.hpp"

namespace qattn {
namespace {

// Hand-ordered: the tilings fastest on the H100 first (the reasons are in the kernel headers), so that
// default_tiling() is a good untuned choice.
// Decode (decode_shape.h: bm = query rows per CTA, bn = tokens per warp chunk). ~150-170 registers
// per thread allow 3 CTAs of 4 warps per SM; within that, larger chunks win for the quantized caches
// (fewer, longer copies per byte of cache: the smaller the row, the more a chunk amortizes its fixed
// cost), and bf16 rows, already 256 bytes, take the smallest chunk with the deepest pipeline.
// Rows beyond 16 (GQA x new tokens > 16) take bm 32.
std::vector<Tiling> preferred_decode(const Spec& s) {
  std::vector<Tiling> out;
  for (int bm : {16, 32}) {
    // int4 per_group: bn 64 (the faster chunk at d 128 on sm_90a, contiguous) spills on sm_80 / sm_89
    // (8 bytes), at d 64 (4) and when paged (12) on sm_90a, so there bn 32 comes first.
    const bool bn64_fits = (s.arch == Arch::sm_90 || s.arch == Arch::sm_90a) && s.head_dim == 128 && !s.paged;
    if (s.qk.fmt == Fmt::int4 && s.qk.gran == Gran::per_group && !bn64_fits)
      out.insert(out.end(), {{bm, 32, 4, 2}, {bm, 32, 4, 3}, {bm, 64, 4, 2}});
    else if (s.qk.fmt == Fmt::int4) out.insert(out.end(), {{bm, 64, 4, 2}, {bm, 64, 4, 3}, {bm, 32, 4, 3}, {bm, 32, 4, 2}});
    else if (s.qk.fmt == Fmt::flashq && s.softmax == SoftmaxMode::sas)   // bn 32 spills 56 bytes on sm_80
      out.insert(out.end(), {{bm, 16, 4, 2}, {bm, 32, 4, 2}});
    else if (s.qk.fmt == Fmt::flashq)   // a chunk is a whole 64-token block; bn is the compute step
      out.insert(out.end(), {{bm, 32, 4, 2}, {bm, 16, 4, 2}, {bm, 64, 4, 2}, {bm, 32, 2, 3}});
    else if (s.qk.fmt == Fmt::int8 || s.qk.fmt == Fmt::fp8e4m3)   // fp8: the int8 kernel path, row d bytes
      out.insert(out.end(), {{bm, 32, 4, 3}, {bm, 32, 4, 2}, {bm, 64, 4, 2}, {bm, 16, 4, 3}});
    else out.insert(out.end(), {{bm, 16, 4, 4}, {bm, 32, 2, 3}, {bm, 32, 4, 2}});
    out.insert(out.end(), {{bm, 16, 4, 4}, {bm, 16, 2, 4}, {bm, 64, 2, 2}, {bm, 16, 8, 2}, {bm, 32, 1, 4}, {bm, 16, 1, 4}});
  }
  return out;
}

// GEMV decode (decode_gemv_shape.h: bm = query rows per CTA, 1..8, no padding). With one new token a
// KV head has gqa rows, so the smallest bm holding them comes first; larger chunks for the smaller rows
// of the quantized caches, as in the mma kernel. GEMV beats the tensor cores only at 1-2 rows per KV
// head (no padding to 16 rows); from 4 rows on the mma kernel wins, which is what flow=auto's tuned
// inflection table decides per device (docs/design/tuning.md).
std::vector<Tiling> preferred_gemv(const Spec& s) {
  int rows_bm = 1;
  while (rows_bm < s.gqa && rows_bm < 8) rows_bm *= 2;
  std::vector<Tiling> out;
  for (int bm : {rows_bm, 1, 2, 4, 8}) {
    if (s.qk.fmt == Fmt::int4 || s.qk.fmt == Fmt::flashq)   // flashq: bn 64 only (a chunk is a block)
      out.insert(out.end(), {{bm, 64, 4, 2}, {bm, 32, 4, 2}, {bm, 32, 4, 3}});
    else if (s.quantized()) out.insert(out.end(), {{bm, 32, 4, 3}, {bm, 32, 4, 2}, {bm, 64, 4, 2}});
    else if (bm == 8)   // bn 32 spills 4 bytes with softmax=unified_max on sm_80 (bf16, d 128)
      out.insert(out.end(), {{bm, 16, 4, 4}, {bm, 32, 4, 2}, {bm, 16, 4, 2}});
    else out.insert(out.end(), {{bm, 32, 4, 2}, {bm, 16, 4, 4}, {bm, 16, 4, 2}});
    out.insert(out.end(), {{bm, 32, 2, 3}, {bm, 16, 8, 2}, {bm, 64, 2, 2}, {bm, 16, 2, 4}, {bm, 16, 1, 4}});
  }
  return out;
}

// Moves the given tilings to the end of the list (still candidates the tuner times, no longer the default).
void demote(std::vector<Tiling>& list, const std::vector<Tiling>& spilling) {
  std::stable_partition(list.begin(), list.end(), [&](const Tiling& t) {
    return std::find(spilling.begin(), spilling.end(), t) == spilling.end();
  });
}

std::vector<Tiling> listed(const Spec& s) {
  std::vector<Tiling> out;
  if (s.phase == Phase::decode) return s.flow == Dataflow::gemv ? preferred_gemv(s) : preferred_decode(s);
  if (s.qk.fmt == Fmt::fp16 || s.qk.fmt == Fmt::bf16) {
    const bool sm8x = s.arch == Arch::sm_80 || s.arch == Arch::sm_86 || s.arch == Arch::sm_89;
    auto take = [&](const auto& list) {
      for (const auto& t : list) out.push_back({t.bm, t.bn, t.warps, t.stages});
    };
    if (s.head_dim <= 64) {
      take(prefill_fp16::kTilingsD64);
      // At 255 registers the one-stage bm 128 forms spill 8-12 bytes where listed below; the first tiling
      // of the list that does not spill goes first (bench/results/2026-11-27_spill_sweep/).
      if (!s.causal) demote(out, {{128, 128, 4, 1}});   // every arch
      else if (sm8x) demote(out, {{128, 128, 4, 1}, {128, 128, 4, 2}});   // causal: the 2-stage one too
    }
    else if (s.head_dim <= 96) {
      take(prefill_fp16::kTilingsD96);
      // sm_90: 1 stage spills 12 bytes at d 96 (non-causal), 2 stages do not (prefill_fp16_shape.h).
      if (s.arch == Arch::sm_90 || s.arch == Arch::sm_90a) std::swap(out[0], out[1]);
    }
    else if (s.head_dim <= 128) {
      take(prefill_fp16::kTilingsD128);
      // The one-stage form spills 8-12 bytes on sm_80 (non-causal), sm_86 and sm_89; not on sm_90 / sm_90a.
      if (sm8x && !(s.causal && s.arch == Arch::sm_80)) demote(out, {{128, 64, 4, 1}});
    }
    else take(prefill_fp16::kTilingsD256);
    return out;
  }
  // int8: on sm_90a the wgmma form first (warpgroup tensor cores, Q·K^T from shared memory, P from
  // registers: faster than the mma.sync form at every head dim). The first entry of each list is the
  // fastest of its list on the H100 at N = 4k and 16k, causal or not.
  // At d = 64, 4 blocks per SM (128 registers) beat the 3 that ptxas picks unasked: the tile's
  // dependent phases overlap across more CTAs.
  // d = 96 and 256 are ordered by ptxas's report alone: d = 96 follows d = 128; at d = 256 the int32 O is 128
  // registers, so the register rule of prefill_int8_shape.h leaves bn 64 to wgmma and bn 32 to mma.sync.
  // qk=int4: on sm_80 / sm_86 / sm_89 the packed-int4 form (_i4mma) with the int8 lists' shapes (its
  // smaller Q/K tiles fit the same ones; the tuner orders them per device); on sm_90 / sm_90a the int8
  // compute form, i.e. exactly the int8 lists (the s4 mma is emulated there: never offered).
  if (s.qk.fmt == Fmt::int4 && int4_mma_by_default(s)) {
    Spec as_int8 = s;
    as_int8.qk.fmt = Fmt::int8;
    for (Tiling t : listed(as_int8)) {
      t.int4_mma = true;
      out.push_back(t);
    }
    return out;
  }
  // pv=fp8e4m3 on sm_90a: the wgmma form first (native e4m3 tensor cores; the mma.sync form's .e4m3 runs
  // as FP16 conversions + HMMA there), with the int8 lists' shapes (ptxas: 128-168 registers at d 64 ..
  // 128, 236 / 253 at d 256 bn 64, no spills), then the mma.sync lists below.
  const bool fp8_wgmma = s.pv.fmt == Fmt::fp8e4m3 && s.arch == Arch::sm_90a && !(s.smooth & kSmoothQ);
  if (fp8_wgmma) {
    if (s.head_dim <= 64) out = {{64, 128, 4, 3, true, 4}, {64, 128, 4, 2, true, 4}, {64, 128, 4, 2, true}};
    else if (s.head_dim <= 128) out = {{64, 128, 4, 2, true}, {64, 128, 4, 3, true}, {64, 64, 4, 2, true}};
    else out = {{64, 64, 4, 2, true}, {64, 64, 4, 3, true}};
  }
  // pv=fp16 (mma.sync only) and the mma.sync form of pv=fp8e4m3: the fp16 V tile is 2 bytes per element
  // and the fp32 O / 16-bit P fragments take more registers than the int8 path; ptxas spills at bn 128
  // for d 96 / 128 (sm_80 .. sm_90a), so bn 64 first (accum=fp16 at d 64: bn 64 with 3 stages spills
  // 8-16 bytes, 2 stages do not). Not timed.
  // pv=fp8e4m3 on mma.sync: bn 128 spills 24-116 bytes at d 96 / 128 on sm_90a (not on sm_89), so bn 64.
  // accum=fp16 at d 96: bn 64 with 2 stages spills 8 bytes on sm_80 / sm_89, 3 stages do not.
  if (s.pv.fmt == Fmt::fp16 || s.pv.fmt == Fmt::fp8e4m3) {
    const bool fp8 = s.pv.fmt == Fmt::fp8e4m3;
    auto then = [&out](std::vector<Tiling> list) {
      out.insert(out.end(), list.begin(), list.end());
      return out;
    };
    if (s.head_dim <= 64 && fp8) return then({{64, 64, 4, 3}, {64, 64, 4, 2}, {64, 128, 4, 2}});
    if (s.head_dim <= 64) return then({{64, 64, 4, 2}, {64, 64, 4, 3}, {128, 64, 8, 2}});
    if (s.head_dim <= 96 && s.accum == Accum::fp16) return then({{64, 64, 4, 3}, {64, 64, 4, 2}, {128, 64, 8, 2}});
    if (s.head_dim <= 128) return then({{64, 64, 4, 2}, {64, 64, 4, 3}, {128, 64, 8, 2}});
    // fp8 with Q smoothing at d 256 sits at 255 registers: 2 stages spill 4-8 bytes on sm_90a, 3 do not.
    if (fp8 && (s.smooth & kSmoothQ)) return then({{64, 32, 4, 3}, {64, 32, 4, 2}, {128, 32, 8, 2}});
    return then({{64, 32, 4, 2}, {64, 32, 4, 3}, {128, 32, 8, 2}});
  }
  // Q smoothing runs in the mma.sync form only (validate() refuses _wg for it).
  if (s.arch == Arch::sm_90a && s.pv.fmt == Fmt::int8 && !(s.smooth & kSmoothQ)) {
    if (s.head_dim <= 64)
      out = {{64, 128, 4, 3, true, 4}, {64, 128, 4, 2, true, 4}, {64, 128, 4, 2, true}, {128, 128, 8, 2, true}};
    else if (s.head_dim <= 128) out = {{64, 128, 4, 2, true}, {128, 64, 8, 2, true}, {64, 64, 4, 3, true}};
    else out = {{64, 64, 4, 2, true}, {128, 64, 8, 2, true}, {64, 64, 4, 3, true}};
  }
  if (s.head_dim <= 64) out.insert(out.end(), {{64, 64, 4, 3}, {64, 128, 4, 3}, {64, 64, 4, 2}, {128, 64, 4, 2}});
  else if (s.head_dim <= 128) out.insert(out.end(), {{64, 128, 4, 2}, {64, 128, 4, 3}, {64, 64, 4, 2}, {128, 128, 8, 3}});
  else out.insert(out.end(), {{64, 32, 4, 2}, {64, 32, 4, 3}, {128, 32, 8, 2}});
  return out;
}

// Quantized prefill points whose listed first tiling spills at 255 or at 128 (mb4) registers, found by
// `qattn compile --grid space` (bench/results/2026-11-27_spill_sweep/): the first listed tiling that
// does not spill goes first; the others stay candidates for the tuner.
void demote_spilling_quantized(const Spec& s, std::vector<Tiling>& out) {
  const bool fp8 = s.pv.fmt == Fmt::fp8e4m3, two_level = s.accum == Accum::two_level;
  const bool q_smooth = (s.smooth & kSmoothQ) != 0, per_tensor = s.qk.gran == Gran::per_tensor;
  const bool i4 = int4_mma_by_default(s);
  auto shape = [i4](int bm, int bn, int w, int st, bool wg = false, int mb = 0) {
    return Tiling{bm, bn, w, st, wg, mb, i4};
  };
  if (s.head_dim <= 64 && fp8 && two_level)   // the wgmma mb4 forms: 4-32 bytes at 128 registers
    demote(out, {shape(64, 128, 4, 3, true, 4), shape(64, 128, 4, 2, true, 4)});
  if (s.head_dim <= 64 && fp8 && (per_tensor || s.qk.gran == Gran::per_block) && (two_level || q_smooth))
    demote(out, {shape(64, 64, 4, 3)});   // mma.sync, 3 stages: 4 bytes
  if (s.head_dim > 64 && s.head_dim <= 96 && s.qk.fmt == Fmt::int4 && (per_tensor || s.qk.gran == Gran::per_block) &&
      s.pv.fmt != Fmt::int8)
    demote(out, {shape(64, 64, 4, 2)});   // 168 registers, 4 bytes; 3 stages do not spill
  if (s.head_dim > 128 && fp8 && q_smooth && two_level && s.arch == Arch::sm_89)
    demote(out, {shape(64, 32, 4, 3)});   // 16-20 bytes; 2 stages: none (causal: 12, as every listed one)
}

// Variable-length kernels hold each sequence's lengths in registers where the equal-length ones read
// the call's from constant memory: the listed first tilings that were at the register file's edge spill
// then (8-16 bytes; tests/templates/attention/varlen_compile_test.cpp), and the next listed one goes first.
void demote_spilling_varlen(const Spec& s, std::vector<Tiling>& out) {
  if (!s.quantized() && s.head_dim <= 64) demote(out, {{128, 128, 4, 1}, {128, 128, 4, 2}});
  else if (!s.quantized() && s.head_dim > 96 && s.head_dim <= 128) demote(out, {{128, 64, 4, 1}});
  else if (s.quantized() && s.head_dim > 64 && s.head_dim <= 96) demote(out, {{64, 128, 4, 2}});
  // Q smoothing at d 64 (mma.sync, 3 stages): ptxas caps it at 128 registers with 4 bytes spilled.
  if (s.quantized() && s.head_dim <= 64 && (s.smooth & kSmoothQ)) {
    const bool i4 = int4_mma_by_default(s);
    demote(out, {Tiling{64, 64, 4, 3, false, 0, i4}});
  }
}

// Moves `t` to the front when listed (it becomes the default; the others stay candidates).
void promote(std::vector<Tiling>& list, const Tiling& t) {
  const auto it = std::find(list.begin(), list.end(), t);
  if (it != list.end()) std::rotate(list.begin(), it, it + 1);
}

// GEMV decode points whose listed first tiling spills 4-16 bytes at the register cap of its launch
// bounds (168 or 128), found by `qattn compile --grid space` (bench/results/2026-11-28_spill_sweep_decode*):
// the first listed tiling that does not spill goes first.
void demote_spilling_gemv(const Spec& s, std::vector<Tiling>& out) {
  const bool sm90 = s.arch == Arch::sm_90 || s.arch == Arch::sm_90a;
  const bool sixteen = s.qk.fmt == Fmt::fp16 || s.qk.fmt == Fmt::bf16;
  const bool umax = s.softmax == SoftmaxMode::unified_max;
  if (sixteen && sm90 && s.head_dim == 64) demote(out, {{8, 16, 4, 4}});   // bm 8 (gqa 8), causal or sas
  if (sixteen && sm90 && s.head_dim == 128 && umax) demote(out, {{2, 32, 4, 2}, {4, 32, 4, 2}});
  if (sixteen && sm90 && s.head_dim == 256 && umax && s.causal) {
    demote(out, {{1, 16, 4, 2}});
    // Every bm 4 form spills at gqa 4 (4 bytes at 168 registers); bm 2 reads each KV row twice, not four times.
    if (s.gqa == 4) promote(out, {2, 16, 4, 2});
  }
  // FlashQ at gqa 2 (bm 2) sits at its 168-register cap, and NVRTC's output for it varies from compile
  // to compile (docs/design/cache.md): in 4 compiles each, both bm 2 forms spilled 4-16 bytes in some.
  if (s.qk.fmt == Fmt::flashq && sm90 && ((umax && s.head_dim == 128) || (s.softmax == SoftmaxMode::sas && s.head_dim == 256)))
    demote(out, {{2, 64, 4, 2}, {2, 64, 2, 2}});
}

// Points whose first tiling spills, found and repaired by the spill sweep (`qattn compile --grid space
// --repair`, docs/cli.md): kernel-name stem (the name before "__") -> the tiling that goes first.
void promote_repaired(const Spec& s, std::vector<Tiling>& out) {
  if (s.arch == Arch::unset || out.empty()) return;
  const std::string stem = spec_name(s);
  for (const gen::SpillPromotion& p : gen::spill_promotions())
    if (stem == p.stem) return promote(out, parse_tiling(p.tiling));
}

std::vector<Tiling> preferred(const Spec& s) {
  std::vector<Tiling> out = listed(s);
  if (s.phase == Phase::decode && s.flow == Dataflow::gemv) demote_spilling_gemv(s, out);
  if (s.phase == Phase::prefill && s.quantized()) demote_spilling_quantized(s, out);
  if (s.varlen) demote_spilling_varlen(s, out);
  promote_repaired(s, out);
  return out;
}

void add_unique(std::vector<Tiling>& out, const Tiling& t) {
  for (const Tiling& x : out)
    if (x == t) return;
  out.push_back(t);
}

}  // namespace

namespace gen {

const std::vector<SpillPromotion>& spill_promotions() {
  static const std::vector<SpillPromotion> rows = {
#include "generator/spill_promotions.inc"
  };
  return rows;
}

std::vector<Tiling> candidate_tilings(const Spec& spec, const DeviceLimits& limits) {
  if (spec.phase == Phase::linear) return linear_candidates(spec, limits);
  std::vector<Tiling> all = preferred(spec);
  // The fp16/bf16 list is a shortlist of the shapes that fit; the int8 kernel's space is swept.
  // The wgmma forms also with a minimum of 4 blocks per SM (validate() drops those that cannot fit).
  const bool i4mma = int4_mma_by_default(spec);   // see preferred()
  if (spec.quantized() && spec.phase == Phase::prefill)
    for (bool wg : {true, false})
      for (int bm : {64, 128})
        if (!(wg && (spec.smooth & kSmoothQ)))
        for (int bn : {32, 64, 128})
          for (int w : {4, 8})
            for (int st : {2, 3}) {
              if (i4mma && wg) continue;   // the packed-int4 form is mma.sync only
              add_unique(all, Tiling{bm, bn, w, st, wg, 0, i4mma});
              if (wg && w == 4) add_unique(all, Tiling{bm, bn, w, st, wg, 4});
            }
  // The warp-specialized forms (a producer warpgroup keeps a ring of stages full; deeper rings pay there),
  // one CTA per tile, and persistent with one consumer warpgroup (with two it was slower still:
  // bench/results/2026-12-07_persistent_ws_h200), at bn 128 only: bn 64 was slower at every point
  // measured (bench/results/2026-11-27_warp_specialized_h100).
  if (spec.quantized() && spec.phase == Phase::prefill)
    for (int w : {8, 4})
      for (int st : {2, 3, 4}) {
        Tiling ws{16 * w, 128, w, st, true};
        ws.tma = true;
        ws.warp_specialized = true;
        add_unique(all, ws);
        ws.persistent = true;
        if (w == 4) add_unique(all, ws);   // the persistent launch of the one-consumer form (the faster one)
      }
  std::vector<Tiling> valid;
  for (const Tiling& t : all)
    if (validate(spec, t, limits)) add_unique(valid, t);   // hand lists may repeat a shared fallback
  return valid;
}

Tiling decode_tiling(const Spec& spec, int rows, const DeviceLimits& limits) {
  const std::vector<Tiling> c = candidate_tilings(spec, limits);
  if (c.empty()) throw Error(ErrorKind::failure, "no decode tiling fits " + to_string(spec) + " within the device limits");
  if (rows == spec.gqa) return c.front();
  int want_bm = rows <= 16 ? 16 : 32;
  if (spec.flow == Dataflow::gemv)
    for (want_bm = 1; want_bm < rows && want_bm < 8;) want_bm *= 2;
  for (const Tiling& t : c)
    if (t.block_m == want_bm) return t;
  return c.front();
}

Tiling launchable_tiling(const Spec& spec, const Problem& problem, const Tiling& chosen, const DeviceLimits& limits) {
  const Verdict fits = grid_fits(spec, chosen, problem);
  if (fits) return chosen;
  for (const Tiling& t : candidate_tilings(spec, limits))
    if (grid_fits(spec, t, problem)) return t;
  throw_bad_input(fits.reason);
}

}  // namespace gen

Tiling default_tiling(const Spec& spec, const DeviceLimits& limits) {
  require(validate(spec));
  if (spec.phase == Phase::linear && spec.flow == Dataflow::automatic)
    throw_bad_input("'" + to_string(spec) + "' names no kernel: flow=auto is chosen per call by the token count; "
                    "give flow=gemv, flow=flat or flow=gemm");
  const auto c = gen::candidate_tilings(spec, limits);
  if (c.empty()) throw Error(ErrorKind::failure, "no tiling fits " + to_string(spec) + " within the device limits");
  return c.front();
}

namespace gen {

std::vector<Spec> default_grid(Arch arch) {
  std::vector<Spec> grid;
  auto add = [&](Operand qk, Operand pv, Fmt out, int d, bool causal, int smooth) {
    Spec s;
    s.qk = qk;
    s.pv = pv;
    s.out = out;
    s.head_dim = d;
    s.causal = causal;
    s.smooth = smooth;
    s.arch = arch;
    grid.push_back(s);
  };
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      for (Fmt f : {Fmt::fp16, Fmt::bf16}) add({f, Gran::none}, {f, Gran::none}, f, d, causal, kSmoothNone);
      for (Gran qg : {Gran::per_token, Gran::per_block, Gran::per_tensor})
        for (Gran vg : {Gran::per_channel, Gran::per_tensor})
          add({Fmt::int8, qg}, {Fmt::int8, vg}, Fmt::fp16, d, causal,
              vg == Gran::per_channel ? kSmoothK | kSmoothV : kSmoothK);
      add({Fmt::int8, Gran::per_token}, {Fmt::int8, Gran::per_channel}, Fmt::bf16, d, causal, kSmoothK | kSmoothV);
    }
  // per_warp / per_thread Q/K: the per_token kernel with group scales expanded per row
  // (generator/quant_plan.hpp), so these points add only their quantization passes and kernel names.
  for (Gran qg : {Gran::per_warp, Gran::per_thread}) {
    add({Fmt::int8, qg}, {Fmt::int8, Gran::per_tensor}, Fmt::fp16, 128, false, kSmoothK);
    add({Fmt::int8, qg}, {Fmt::int8, Gran::per_channel}, Fmt::bf16, 128, true, kSmoothK | kSmoothV);
  }
  // qk=int4: packed int4 Q·K^T (_i4mma) on sm_80 .. sm_89, int8 compute on sm_90 / sm_90a
  // (validate.hpp, dispatch_note); once per mask with the int8 P·V of the main job.
  for (bool causal : {false, true})
    add({Fmt::int4, Gran::per_token}, {Fmt::int8, Gran::per_channel}, Fmt::fp16, 128, causal, kSmoothK | kSmoothV);
  // d 96 and 256: each kernel family once per mask: fp16, bf16, and int8 with per-channel V
  // (fp16 out) and per-tensor V (bf16 out), whose Q/K granularities pick different quantization passes.
  for (int d : {96, 256})
    for (bool causal : {false, true}) {
      for (Fmt f : {Fmt::fp16, Fmt::bf16}) add({f, Gran::none}, {f, Gran::none}, f, d, causal, kSmoothNone);
      add({Fmt::int8, Gran::per_token}, {Fmt::int8, Gran::per_channel}, Fmt::fp16, d, causal, kSmoothK | kSmoothV);
      add({Fmt::int8, causal ? Gran::per_block : Gran::per_tensor}, {Fmt::int8, Gran::per_tensor}, Fmt::bf16, d, causal,
          kSmoothK);
    }
  // Quantized Q·K^T with fp16 / fp8 P·V (mma.sync form): every head dim, each accumulation
  // mode, both masks (spread over the points), V smoothing with fp8 V. sm_80 / sm_86 have no FP8 mma.
  const bool fp8_mma = arch == Arch::sm_89 || arch == Arch::sm_90 || arch == Arch::sm_90a;
  for (int d : {64, 96, 128, 256}) {
    const bool c = d == 64 || d == 256;
    add({Fmt::int8, Gran::per_token}, {Fmt::fp16, Gran::none}, Fmt::fp16, d, c, kSmoothK);
    add({Fmt::int8, Gran::per_block}, {Fmt::fp16, Gran::none}, Fmt::bf16, d, !c, kSmoothK);
    add({Fmt::int8, Gran::per_token}, {Fmt::fp16, Gran::none}, Fmt::fp16, d, !c, kSmoothK);
    grid.back().accum = Accum::fp16;
    if (!fp8_mma) continue;
    add({Fmt::int8, Gran::per_token}, {Fmt::fp8e4m3, Gran::per_channel}, Fmt::fp16, d, c, kSmoothK | kSmoothV);
    add({Fmt::int8, Gran::per_block}, {Fmt::fp8e4m3, Gran::per_channel}, Fmt::bf16, d, !c, kSmoothK);
    add({Fmt::int8, Gran::per_token}, {Fmt::fp8e4m3, Gran::per_channel}, Fmt::fp16, d, c, kSmoothK);
    grid.back().accum = Accum::two_level;
    // SageAttention2-4b: int4 Q/K (int8 compute with Q smoothing), fp8 P·V, every smoothing.
    add({Fmt::int4, Gran::per_warp}, {Fmt::fp8e4m3, Gran::per_channel}, Fmt::fp16, d, !c, kSmoothQ | kSmoothK | kSmoothV);
  }
  // Q smoothing (smooth=q with k, and v where V is per-channel): the mma.sync kernel with the
  // ΔS product, every head dim and mask, and the quantizer's block-mean passes for every Q granularity.
  for (int d : {64, 96, 128, 256})
    for (bool causal : {false, true}) {
      add({Fmt::int8, Gran::per_token}, {Fmt::int8, Gran::per_channel}, Fmt::fp16, d, causal, kSmoothQ | kSmoothK | kSmoothV);
      add({Fmt::int8, Gran::per_block}, {Fmt::int8, Gran::per_tensor}, Fmt::bf16, d, causal, kSmoothQ | kSmoothK);
    }
  for (Gran qg : {Gran::per_tensor, Gran::per_warp, Gran::per_thread})
    add({Fmt::int8, qg}, {Fmt::int8, Gran::per_tensor}, Fmt::fp16, 128, qg == Gran::per_warp, kSmoothQ | kSmoothK);
  // Decode: every KV-cache format and head dim, contiguous and non-causal, and paged with the causal
  // mask (several new tokens per sequence), GQA 4; and each format with softmax=sas.
  const Operand kv_formats[] = {{Fmt::fp16, Gran::none}, {Fmt::bf16, Gran::none}, {Fmt::int8, Gran::per_token},
                                {Fmt::int4, Gran::per_token}, {Fmt::int4, Gran::per_group},
                                {Fmt::fp8e4m3, Gran::per_head}, {Fmt::flashq, Gran::per_channel}};
  for (const Operand& kv : kv_formats)
    for (int d : {64, 128, 256})
      for (bool paged_causal : {false, true}) {
        const Fmt out = kv.fmt == Fmt::bf16 || (kv.gran != Gran::none && d == 128) ? Fmt::bf16 : Fmt::fp16;
        add(kv, kv, out, d, paged_causal, kSmoothNone);
        grid.back().phase = Phase::decode;
        grid.back().gqa = 4;
        grid.back().paged = paged_causal;
      }
  for (const Operand& kv : kv_formats) {   // softmax=sas: one point per format
    add(kv, kv, kv.fmt == Fmt::fp16 ? Fmt::fp16 : Fmt::bf16, 128, false, kSmoothNone);
    grid.back().phase = Phase::decode;
    grid.back().gqa = 4;
    grid.back().softmax = SoftmaxMode::sas;
  }
  for (int i : {1, 2, 3}) {   // softmax=unified_max: bf16, int8 (paged, causal), int4 per token
    add(kv_formats[i], kv_formats[i], i == 2 ? Fmt::fp16 : Fmt::bf16, 128, i == 2, kSmoothNone);
    grid.back().phase = Phase::decode;
    grid.back().gqa = 4;
    grid.back().paged = i == 2;
    grid.back().softmax = SoftmaxMode::unified_max;
  }
  // GEMV decode (flow=gemv): every format at d 128 with GQA 1, 2, 4 and 8 among them (so the default
  // bm is 1, 2, 4 and 8), d 64 and 256 at both ends of bm, and softmax sas and unified_max.
  struct GemvPoint {
    Operand kv;
    Fmt out;
    int d, gqa;
    bool paged_causal;
    SoftmaxMode softmax;
  };
  const Operand f16{Fmt::fp16, Gran::none}, b16{Fmt::bf16, Gran::none}, i8{Fmt::int8, Gran::per_token},
      i4{Fmt::int4, Gran::per_token}, i4g{Fmt::int4, Gran::per_group}, e4m3{Fmt::fp8e4m3, Gran::per_head},
      fq{Fmt::flashq, Gran::per_channel};
  const GemvPoint gemv_points[] = {
      {f16, Fmt::fp16, 128, 1, false, SoftmaxMode::exact},  {b16, Fmt::bf16, 128, 2, true, SoftmaxMode::exact},
      {i8, Fmt::fp16, 128, 4, false, SoftmaxMode::exact},   {i4, Fmt::bf16, 128, 8, true, SoftmaxMode::exact},
      {i4g, Fmt::fp16, 128, 4, true, SoftmaxMode::exact},   {e4m3, Fmt::bf16, 128, 8, false, SoftmaxMode::exact},
      {i8, Fmt::bf16, 64, 1, true, SoftmaxMode::exact},     {i8, Fmt::fp16, 64, 8, false, SoftmaxMode::exact},
      {i8, Fmt::fp16, 256, 1, false, SoftmaxMode::exact},   {i8, Fmt::bf16, 256, 8, true, SoftmaxMode::exact},
      {i4, Fmt::fp16, 128, 4, false, SoftmaxMode::sas},     {i4g, Fmt::bf16, 128, 2, true, SoftmaxMode::unified_max},
      {b16, Fmt::bf16, 128, 8, false, SoftmaxMode::unified_max}, {fq, Fmt::bf16, 128, 4, true, SoftmaxMode::exact},
      {fq, Fmt::fp16, 64, 1, false, SoftmaxMode::unified_max},  {fq, Fmt::fp16, 256, 8, false, SoftmaxMode::exact}};
  for (const GemvPoint& g : gemv_points) {
    add(g.kv, g.kv, g.out, g.d, g.paged_causal, kSmoothNone);
    grid.back().phase = Phase::decode;
    grid.back().flow = Dataflow::gemv;
    grid.back().gqa = g.gqa;
    grid.back().paged = g.paged_causal;
    grid.back().softmax = g.softmax;
  }
  return grid;
}

}  // namespace gen
}  // namespace qattn
