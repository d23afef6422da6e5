#include "qattn/validate.hpp"

#include "qattn/attention/prefill_fp16_shape.h"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/attention/tile_order.h"
#include "qattn/decode/decode_gemv_shape.h"
#include "qattn/decode/decode_shape.h"
#include "generator/spec_schema.hpp"
#include "qattn/error.hpp"
#include "qattn/linear/linear_shape.h"

namespace qattn {
namespace {

bool is_float(Fmt f) { return f == Fmt::fp16 || f == Fmt::bf16; }

// The fields of the other family stay at Spec's defaults (the text, the key and the name leave them out).
Verdict validate_family(const Spec& s) {
  const Spec defaults;
  for (const gen::schema::Field& f : gen::schema::fields())
    if (!gen::schema::in_phase(f, s.phase) && f.get(s) != f.get(defaults))
      return Verdict::no(std::string(to_string(s.phase)) + " specs take no " + f.key +
                         (f.domain == gen::schema::Domain::flag ? "" : "=") + " (" + (s.is_attention() ? "a linear-layer" : "an attention") +
                         " field); leave it at its default");
  return Verdict::yes();
}

// A linear layer (templates/qattn/linear/): 16-bit activations, weights as given or quantized.
Verdict validate_linear(const Spec& s) {
  if (!is_float(s.act)) return Verdict::no(std::string("a=") + to_string(s.act) + " is not supported; accepted: fp16, bf16");
  if (!is_float(s.out)) return Verdict::no(std::string("out=") + to_string(s.out) + " is not supported; accepted: fp16, bf16");
  const Operand w = s.weight;
  const std::string wtext = std::string("w=") + to_string(w.fmt) + (w.gran == Gran::none ? "" : std::string(":") + to_string(w.gran));
  int k_multiple = 8;
  if (is_float(w.fmt)) {
    if (w.fmt != s.act)
      return Verdict::no(wtext + " with a=" + to_string(s.act) + ": 16-bit weights share the tensor-core type of A; accepted: w=" +
                         to_string(s.act) + ", w=int8:per_channel, w=int4:per_group");
  } else if (w.fmt == Fmt::int8 && w.gran == Gran::per_channel) {
    k_multiple = 16;
  } else if (w.fmt == Fmt::int4 && w.gran == Gran::per_group) {
    k_multiple = kLinearInt4Group;
  } else {
    return Verdict::no(wtext + " is not a supported weight format; accepted: fp16, bf16, int8:per_channel (one scale per "
                       "output channel), int4:per_group (scale and zero point per 128 input channels)");
  }
  if (s.n < 1 || s.k < 1)
    return Verdict::no("linear spec needs n=<output features> and k=<input features>, each in 1.." + std::to_string(kMaxLinearFeatures));
  if (s.k % k_multiple != 0)
    return Verdict::no("k=" + std::to_string(s.k) + " with " + wtext + ": weight rows are read in 16-byte units" +
                       (w.fmt == Fmt::int4 ? " and groups of 128" : "") + "; accepted: k a multiple of " + std::to_string(k_multiple));
  if (s.flow == Dataflow::mma)
    return Verdict::no("flow=mma is attention decode's dataflow; accepted for linear: auto, gemv, flat, gemm");
  return Verdict::yes();
}

Verdict validate_float(const Spec& s) {
  if (s.pv.fmt != s.qk.fmt || s.pv.gran != Gran::none)
    return Verdict::no(std::string("qk=") + to_string(s.qk.fmt) + " needs pv=" + to_string(s.qk.fmt) +
                       " (the fp16/bf16 kernel keeps one element type); for quantized P/V use qk=int8:<gran>");
  if (s.out != s.qk.fmt)
    return Verdict::no(std::string("qk=") + to_string(s.qk.fmt) + " writes out=" + to_string(s.qk.fmt) +
                       "; accepted: out equal to the input format");
  if (s.smooth != kSmoothNone) return Verdict::no("smoothing applies to quantized Q/K/V; accepted with qk=fp16|bf16: none");
  if (s.rotate != Rotation::none)
    return Verdict::no("rotate=" + std::string(to_string(s.rotate)) + " applies to quantized Q/K; accepted with qk=fp16|bf16: none");
  if (s.accum != Accum::fp32)
    return Verdict::no(std::string("accum=") + to_string(s.accum) +
                       " applies to quantized P·V (qk=int8 with pv=fp16|fp8e4m3); accepted with qk=fp16|bf16: fp32");
  return Verdict::yes();
}

// The P·V side of qk=int8: int8 (INT-FlashAttention), fp16 (P rounded to the V type, V as
// given) or fp8e4m3 (SageAttention2), and the accumulation modes each of them has.
Verdict validate_pv(const Spec& s) {
  const std::string pv = std::string("pv=") + to_string(s.pv.fmt);
  if (s.pv.fmt == Fmt::int8) {
    if (s.pv.gran != Gran::per_tensor && s.pv.gran != Gran::per_channel)
      return Verdict::no(std::string("pv=int8:") + to_string(s.pv.gran) + " is not supported; accepted: per_tensor, per_channel");
    if (s.accum != Accum::fp32)
      return Verdict::no(std::string("accum=") + to_string(s.accum) +
                         " with pv=int8: its int32 accumulation is exact; accepted: fp32 (two_level: pv=fp8e4m3, fp16: pv=fp16)");
    return Verdict::yes();
  }
  if (s.pv.fmt == Fmt::fp16) {
    if (s.pv.gran != Gran::none)
      return Verdict::no(std::string("pv=fp16:") + to_string(s.pv.gran) +
                         ": pv=fp16 takes no scale (P rounds to the V type, V is used as given); accepted: pv=fp16");
    if (s.accum == Accum::two_level)
      return Verdict::no("accum=two_level with pv=fp16: only FP8 mma accumulates in reduced precision; accepted: fp32, fp16");
    if (s.accum == Accum::fp16 && s.out != Fmt::fp16)
      return Verdict::no("accum=fp16 with out=" + std::string(to_string(s.out)) +
                         ": the .f16 accumulate mma takes fp16 V (the input type); accepted: accum=fp32, or out=fp16");
    if (s.smooth & kSmoothV)
      return Verdict::no("smooth=" + smooth_to_string(s.smooth) +
                         " with pv=fp16: V smoothing applies to quantized V; accepted: none, k");
    return Verdict::yes();
  }
  if (s.pv.fmt == Fmt::fp8e4m3) {
    if (s.pv.gran != Gran::per_channel)
      return Verdict::no(std::string("pv=fp8e4m3:") + to_string(s.pv.gran) + " is not supported; accepted: per_channel");
    if (s.arch == Arch::sm_80 || s.arch == Arch::sm_86)
      return Verdict::no("pv=fp8e4m3 on " + std::string(to_string(s.arch)) +
                         ": there is no FP8 mma before sm_89; accepted: pv=fp16 (or pv=int8:per_tensor|per_channel)");
    if (s.accum == Accum::fp16)
      return Verdict::no("accum=fp16 with pv=fp8e4m3: the FP8 mma accumulates in fp32 only; accepted: fp32, two_level");
    return Verdict::yes();
  }
  return Verdict::no(std::string("qk=") + to_string(s.qk.fmt) + " with " + pv + " is not supported; accepted: pv=int8:per_tensor|per_channel, pv=fp16, "
                     "pv=fp8e4m3:per_channel");
}

// qk=int8 and qk=int4 (symmetric codes in [-7, 7]; the INT8 kernel, see dispatch_note) share the rules.
Verdict validate_int8(const Spec& s) {
  const Gran g = s.qk.gran;
  const std::string qk = std::string("qk=") + to_string(s.qk.fmt);
  if (g != Gran::per_tensor && g != Gran::per_block && g != Gran::per_token && g != Gran::per_warp &&
      g != Gran::per_thread)
    return Verdict::no(qk + ":" + to_string(g) +
                       " is not supported; accepted: per_tensor, per_block, per_warp, per_thread, per_token");
  if (s.rotate == Rotation::hadamard && g == Gran::per_tensor)
    return Verdict::no(qk + ":per_tensor with rotate=hadamard: the rotation runs in the pass that computes each row's "
                       "scale, and a per-tensor abs-max comes from an earlier pass over unrotated rows; accepted: "
                       "per_block, per_warp, per_thread, per_token");
  if (Verdict v = validate_pv(s); !v) return v;
  if (!is_float(s.out)) return Verdict::no(std::string("out=") + to_string(s.out) + " is not supported; accepted: fp16, bf16");
  if ((s.smooth & kSmoothV) && s.pv.fmt == Fmt::int8 && s.pv.gran != Gran::per_channel)
    return Verdict::no("smooth=" + smooth_to_string(s.smooth) + " with pv=int8:" + to_string(s.pv.gran) +
                       ": V smoothing needs per-channel V scales; accepted: pv=int8:per_channel");
  return Verdict::yes();
}

// qk=fp8e4m3: Q and K as e4m3 codes with fp32 scales (the input format of FlashAttention-3's and cuDNN's
// FP8 attention), on the int8 kernel's wgmma form (e4m3 wgmma, fp32 S); granularities, P·V formats,
// smoothing and rotation as for qk=int8.
Verdict validate_fp8_qk(const Spec& s) {
  if (s.arch != Arch::unset && s.arch != Arch::sm_90a)
    return Verdict::no("qk=fp8e4m3 on " + std::string(to_string(s.arch)) +
                       ": FP8 Q·K^T runs on the wgmma kernel only; accepted: arch=sm_90a (elsewhere use qk=int8:<gran>)");
  if (s.pv.fmt == Fmt::fp16)
    return Verdict::no("qk=fp8e4m3 with pv=fp16: the wgmma kernel runs quantized P·V only; accepted: pv=fp8e4m3:per_channel, "
                       "pv=int8:per_tensor|per_channel");
  if (s.smooth & kSmoothQ)
    return Verdict::no("smooth=" + smooth_to_string(s.smooth) +
                       " with qk=fp8e4m3: Q smoothing runs in the mma.sync form only; accepted: none, k, v, kv");
  return validate_int8(s);
}

// Decode over a KV cache (templates/qattn/decode/): K and V caches share one format.
Verdict validate_decode(const Spec& s) {
  if (!kv::format_ok(s.qk.fmt, s.qk.gran))
    return Verdict::no("decode qk=" + std::string(to_string(s.qk.fmt)) +
                       (s.qk.gran == Gran::none ? "" : std::string(":") + to_string(s.qk.gran)) +
                       " is not a supported KV-cache format; accepted: fp16, bf16, int8:per_token, int4:per_token, "
                       "int4:per_group, fp8e4m3:per_head, flashq:per_channel");
  if (s.pv != s.qk) return Verdict::no("decode: the K and V caches share one format; accepted: pv equal to qk");
  if (!is_float(s.out)) return Verdict::no(std::string("out=") + to_string(s.out) + " is not supported; accepted: fp16, bf16");
  if (is_float(s.qk.fmt) && s.out != s.qk.fmt)
    return Verdict::no(std::string("decode qk=") + to_string(s.qk.fmt) + " takes queries and writes outputs of the same type; accepted: out=" +
                       to_string(s.qk.fmt));
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256)
    return Verdict::no("decode d=" + std::to_string(s.head_dim) + " is not supported; accepted: 64, 128, 256");
  if (s.accum != Accum::fp32) return Verdict::no(std::string("accum=") + to_string(s.accum) + " applies to prefill; accepted for decode: fp32");
  if (s.smooth != kSmoothNone) return Verdict::no("smoothing applies to prefill; accepted for decode: none");
  if (s.rotate != Rotation::none) return Verdict::no("rotate=" + std::string(to_string(s.rotate)) + " applies to prefill; accepted for decode: none");
  if (s.gqa < 1 || s.gqa > 64) return Verdict::no("gqa=" + std::to_string(s.gqa) + " is out of range; accepted: 1..64");
  if (s.varlen)
    return Verdict::no("varlen applies to prefill; decode takes each sequence's cache length in DecodeCall::kv_lens: drop varlen");
  return Verdict::yes();
}

}  // namespace

DeviceLimits default_limits(Arch arch) {
  DeviceLimits l;
  switch (arch) {
    case Arch::sm_80: l.max_smem_per_block = 163 * 1024; l.smem_per_sm = 164 * 1024; break;
    case Arch::sm_86:
    case Arch::sm_89: l.max_smem_per_block = 99 * 1024; l.smem_per_sm = 100 * 1024; l.max_threads_per_sm = 1536; break;
    case Arch::sm_90:
    case Arch::sm_90a: l.max_smem_per_block = 227 * 1024; l.smem_per_sm = 228 * 1024; break;
    case Arch::unset: l.max_smem_per_block = 48 * 1024; l.smem_per_sm = 48 * 1024; break;
  }
  return l;
}

Verdict validate(const Spec& s) {
  if (Verdict v = validate_family(s); !v) return v;
  if (s.phase == Phase::linear) return validate_linear(s);
  if (s.phase == Phase::decode && (s.flow == Dataflow::flat || s.flow == Dataflow::gemm))
    return Verdict::no(std::string("flow=") + to_string(s.flow) + " is a linear-layer dataflow; accepted for decode: auto, mma, gemv");
  if (s.phase == Phase::decode) return validate_decode(s);
  if (s.paged) return Verdict::no("paged applies to a decode KV cache; accepted for prefill: no paged token");
  if (s.flow != Dataflow::automatic) return Verdict::no("flow= picks a decode dataflow; accepted for prefill: no flow token");
  if (s.head_dim != 64 && s.head_dim != 96 && s.head_dim != 128 && s.head_dim != 256)
    return Verdict::no("d=" + std::to_string(s.head_dim) + " is not supported by prefill; accepted: 64, 96, 128, 256");
  if (s.split_k != 0) return Verdict::no("splitk applies to decode only; accepted for prefill: no splitk");
  if (s.softmax != SoftmaxMode::exact)
    return Verdict::no(std::string("softmax=") + to_string(s.softmax) +
                       " is a decode mode (issue #4); accepted for prefill: exact");
  if (s.gqa < 1 || s.gqa > 64) return Verdict::no("gqa=" + std::to_string(s.gqa) + " is out of range; accepted: 1..64");
  if (is_float(s.qk.fmt)) return validate_float(s);
  if (s.qk.fmt == Fmt::int8 || s.qk.fmt == Fmt::int4) return validate_int8(s);
  if (s.qk.fmt == Fmt::fp8e4m3) return validate_fp8_qk(s);
  return Verdict::no(std::string("qk=") + to_string(s.qk.fmt) +
                     " is not a prefill Q/K format; accepted: fp16, bf16, int8, int4, fp8e4m3");
}

int kernel_smem_bytes(const Spec& s, const Tiling& t) {
  if (s.phase == Phase::linear) {
    if (linear::linear_tiling_problem(s.flow, s.act, s.weight.fmt, t.block_m, t.block_n, t.warps, t.stages, t.wgmma)) return 0;
    return linear::linear_smem_bytes(s.flow, s.act, s.weight.fmt, t.block_m, t.block_n, t.warps, t.stages, t.wgmma);
  }
  if (s.phase == Phase::decode) {
    if (t.wgmma) return 0;
    if (s.flow == Dataflow::gemv) {
      if (!decode::gemv_tiling_ok(s.qk.fmt, s.qk.gran, s.head_dim, t.block_m, t.block_n, t.warps, t.stages)) return 0;
      return decode::gemv_smem_bytes(s.qk.fmt, s.qk.gran, s.head_dim, t.block_m, t.block_n, t.warps, t.stages);
    }
    if (!decode::tiling_ok(s.qk.fmt, s.qk.gran, s.head_dim, t.block_m, t.block_n, t.warps, t.stages)) return 0;
    return decode::smem_bytes(s.qk.fmt, s.qk.gran, s.head_dim, t.block_m, t.block_n, t.warps, t.stages);
  }
  if (is_float(s.qk.fmt)) {
    if (!prefill_fp16::tiling_ok(s.head_dim, t.block_m, t.block_n, t.warps, t.stages)) return 0;
    return prefill_fp16::smem_bytes(s.head_dim, t.block_m, t.block_n, t.stages, 2);
  }
  const bool qsmooth = (s.smooth & kSmoothQ) != 0;
  const int v_bytes = s.pv.fmt == Fmt::fp16 ? 2 : 1;   // pv=fp16: the V tile as given (fp16/bf16)
  if (!prefill_int8::tiling_ok(s.head_dim, t.block_m, t.block_n, t.warps, t.stages, t.wgmma, v_bytes,
                               s.accum == Accum::fp16, t.int4_mma, qsmooth))
    return 0;
  return prefill_int8::smem_bytes(s.head_dim, t.block_m, t.block_n, t.stages, t.wgmma, v_bytes, t.int4_mma, qsmooth,
                                  t.q_fused, t.tma, t.warp_specialized);
}

// What the fused-Q form (_qf) does not do: pack int4 Q, subtract Q's block means, rotate.
static bool fused_q_excluded(const Spec& s, const Tiling& t) {
  return t.int4_mma || (s.smooth & kSmoothQ) || s.rotate != Rotation::none;
}

// A linear kernel: one dataflow, the tiling its template accepts (qattn/linear/linear_shape.h).
static Verdict validate_linear_tiling(const Spec& s, const Tiling& t, const DeviceLimits& limits) {
  if (s.flow == Dataflow::automatic)
    return Verdict::no("a linear kernel is one dataflow: flow=gemv, flat or gemm (flow=auto is a request, chosen per call by M)");
  if (t.int4_mma || t.q_fused || t.tma || t.warp_specialized || t.persistent || t.min_blocks > 0)
    return Verdict::no("tiling " + to_string(t) + ": _i4mma, _qf, _tma, _ws, _ps and _mb are attention-kernel forms; a linear tiling "
                       "is bm<tokens>_bn<channels>_w<warps>_s<stages>[_wg]");
  if (t.wgmma && (s.flow != Dataflow::gemm || s.arch != Arch::sm_90a))
    return Verdict::no("tiling " + to_string(t) + ": _wg (wgmma) exists for flow=gemm on arch=sm_90a only; drop _wg");
  if (const char* why = linear::linear_tiling_problem(s.flow, s.act, s.weight.fmt, t.block_m, t.block_n, t.warps, t.stages, t.wgmma))
    return Verdict::no("tiling " + to_string(t) + " is not supported by the flow=" + to_string(s.flow) + " linear kernel: " + why +
                       " (valid tilings: templates/qattn/linear/linear_shape.h)");
  const int smem = kernel_smem_bytes(s, t);
  if (smem > limits.max_smem_per_block)
    return Verdict::no("tiling " + to_string(t) + " needs " + std::to_string(smem) + " bytes of shared memory; " +
                       to_string(s.arch) + " allows " + std::to_string(limits.max_smem_per_block));
  if (block_threads(t) > limits.max_threads_per_block) return Verdict::no("tiling " + to_string(t) + " has too many threads per block");
  return Verdict::yes();
}

Verdict validate(const Spec& s, const Tiling& t, const DeviceLimits& limits) {
  if (Verdict v = validate(s); !v) return v;
  if (s.arch == Arch::unset) return Verdict::no("no arch: set arch=<sm_80|sm_86|sm_89|sm_90|sm_90a> or run on a GPU");
  if (s.phase == Phase::linear) return validate_linear_tiling(s, t, limits);
  const bool int_prefill = s.phase == Phase::prefill && s.quantized();   // the int8 kernel (int8, int4, fp8e4m3 Q/K)
  if (t.wgmma && !int_prefill)
    return Verdict::no("tiling " + to_string(t) + ": the wgmma form (_wg) exists for the int8 prefill kernel only "
                       "(qk=int8, qk=int4 as int8 compute, qk=fp8e4m3); drop _wg");
  if (s.phase == Phase::prefill && s.qk.fmt == Fmt::fp8e4m3 && !t.wgmma)
    return Verdict::no("tiling " + to_string(t) + ": qk=fp8e4m3 runs on the wgmma form only; add _wg, e.g. bm64_bn128_w4_s2_wg");
  if (t.int4_mma && (s.qk.fmt != Fmt::int4 || s.phase != Phase::prefill))
    return Verdict::no("tiling " + to_string(t) + ": _i4mma (packed int4 Q·K^T) applies to prefill qk=int4 only; drop _i4mma");
  if (t.int4_mma && t.wgmma)
    return Verdict::no("tiling " + to_string(t) + ": the packed int4 form (_i4mma) runs on mma.sync only; "
                       "drop _wg (int8 compute on wgmma) or _i4mma");
  if (t.wgmma && s.pv.fmt == Fmt::fp16)
    return Verdict::no("tiling " + to_string(t) + ": the wgmma form (_wg) runs int8 and fp8e4m3 P·V; pv=fp16 uses the "
                       "mma.sync form: drop _wg");
  if (t.wgmma && (s.smooth & kSmoothQ))
    return Verdict::no("tiling " + to_string(t) + ": smooth=" + smooth_to_string(s.smooth) +
                       " (Q smoothing) runs in the mma.sync form only; drop _wg (accepted with _wg: smooth=none, k, v, kv)");
  if (t.int4_mma && (s.smooth & kSmoothQ))
    return Verdict::no("tiling " + to_string(t) + ": smooth=" + smooth_to_string(s.smooth) +
                       " (Q smoothing) needs int8 K tiles for its ΔS product; drop _i4mma (qk=int4 then runs as int8 compute)");
  if (t.q_fused && !int_prefill)
    return Verdict::no("tiling " + to_string(t) + ": _qf (Q quantized inside the kernel) applies to the int8 prefill "
                       "kernel (qk=int8|int4|fp8e4m3); drop _qf");
  if (t.q_fused && !fused_q_gran(s.qk.gran))
    return Verdict::no("tiling " + to_string(t) + ": _qf quantizes Q per CTA tile, and qk=" + to_string(s.qk.fmt) + ":" +
                       to_string(s.qk.gran) + " needs statistics of the whole tensor; accepted with _qf: per_block, "
                       "per_warp, per_thread, per_token");
  if (t.q_fused && fused_q_excluded(s, t))
    return Verdict::no("tiling " + to_string(t) + ": _qf writes plain Q codes; it does not pack int4 (_i4mma), "
                       "subtract Q's block means (smooth=q) or rotate (rotate=hadamard): drop _qf");
  if (t.tma && !t.wgmma)
    return Verdict::no("tiling " + to_string(t) + ": _tma (TMA tile loads) exists in the wgmma form only; add _wg or drop _tma");
  if (t.tma && s.head_dim != 64 && s.head_dim != 128)
    return Verdict::no("tiling " + to_string(t) + ": _tma loads K rows of one swizzle atom; accepted: d=64, d=128 (got d=" +
                       std::to_string(s.head_dim) + "); drop _tma");
  if (t.warp_specialized && !(t.wgmma && t.tma))
    return Verdict::no("tiling " + to_string(t) + ": _ws (a producer warpgroup loading by TMA) needs _wg and _tma, "
                       "e.g. bm128_bn128_w8_s2_wg_tma_ws");
  if (t.persistent && !t.warp_specialized)
    return Verdict::no("tiling " + to_string(t) + ": _ps (persistent CTAs) is a form of the warp-specialized kernel; "
                       "it needs _ws, e.g. bm128_bn128_w8_s2_wg_tma_ws_ps");
  if (t.warp_specialized && t.q_fused)
    return Verdict::no("tiling " + to_string(t) + ": _ws reads a pre-quantized Q; drop _qf or _ws");
  // Its P·V of tile t - 1 stays in flight through tile t's softmax; the fresh two-level accumulator on
  // top of that spills 8-20 bytes at d 128 (ptxas, CUDA 13.0).
  if (t.warp_specialized && s.accum == Accum::two_level && s.head_dim > 64)
    return Verdict::no("tiling " + to_string(t) + ": _ws with accum=two_level runs at d=64 only (got d=" +
                       std::to_string(s.head_dim) + "); use accum=fp32 or drop _ws");
  if (t.warp_specialized && t.min_blocks > 0)
    return Verdict::no("tiling " + to_string(t) + ": _ws fixes its blocks per SM (1 with 8 warps, 2 with 4); drop _mb" +
                       std::to_string(t.min_blocks));
  if (t.wgmma && s.arch != Arch::sm_90a)
    return Verdict::no("tiling " + to_string(t) + ": wgmma needs arch=sm_90a (got " + to_string(s.arch) + "); drop _wg");
  const int smem = kernel_smem_bytes(s, t);
  if (smem == 0 && s.phase == Phase::decode)
    return Verdict::no("tiling " + to_string(t) + " is not supported by the decode kernel for " + to_string(s) +
                       " (see the valid tilings in templates/qattn/decode/decode_" +
                       (s.flow == Dataflow::gemv ? "gemv_" : "") + "shape.h)");
  if (smem == 0)
    return Verdict::no("tiling " + to_string(t) + " is not supported by the " +
                       (is_float(s.qk.fmt) ? "fp16/bf16" : t.int4_mma ? "packed int4" : "int8") + " kernel at d=" +
                       std::to_string(s.head_dim) +
                       " (see the valid tilings in templates/qattn/attention/prefill_" +
                       (is_float(s.qk.fmt) ? "fp16" : "int8") + "_shape.h)");
  if (smem > limits.max_smem_per_block)
    return Verdict::no("tiling " + to_string(t) + " needs " + std::to_string(smem) + " bytes of shared memory; " +
                       to_string(s.arch) + " allows " + std::to_string(limits.max_smem_per_block));
  const int threads = block_threads(t);
  if (threads > limits.max_threads_per_block)
    return Verdict::no("tiling " + to_string(t) + " has too many threads per block");
  const int min_blocks = t.warp_specialized ? prefill_int8::ws_blocks_per_sm(t.warps) : t.min_blocks;
  if (min_blocks > 0) {
    const int by_smem = limits.smem_per_sm / (smem + limits.smem_reserved_per_block);
    const int by_threads = limits.max_threads_per_sm / threads;
    if (min_blocks > by_smem || min_blocks > by_threads)
      return Verdict::no("tiling " + to_string(t) + " asks for " + std::to_string(min_blocks) +
                         " blocks per SM; " + to_string(s.arch) + " holds at most " +
                         std::to_string(by_smem < by_threads ? by_smem : by_threads) + " of them (shared memory " +
                         std::to_string(smem) + " bytes, " + std::to_string(threads) + " threads each)");
  }
  return Verdict::yes();
}

Verdict validate(const Spec& s, const Problem& p) {
  if (s.phase == Phase::linear)
    return Verdict::no("a linear spec takes its token count per call (LinearCall::m), not an attention shape");
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.q_len < 1 || p.kv_len < 1)
    return Verdict::no("shape " + to_string(p) + " has a size below 1; every size must be >= 1");
  if (p.batch > static_cast<int>(tile_order::kMaxGridYz) || p.heads_q > static_cast<int>(tile_order::kMaxGridYz))
    return Verdict::no("shape " + to_string(p) + " is over the launch grid: CUDA allows 65535 CTAs in y and z, "
                       "where the kernels put heads and batch; accepted: b <= 65535 and hq <= 65535 (split the call)");
  if (s.phase == Phase::decode && p.q_len > 64)
    return Verdict::no("shape " + to_string(p) + ": decode takes 1..64 new tokens per sequence (q); use prefill for more");
  if (s.phase == Phase::decode && p.q_len > p.kv_len)
    return Verdict::no("shape " + to_string(p) + ": the new tokens are part of the cache, so kv must be >= q");
  if (p.heads_q != p.heads_kv * s.gqa)
    return Verdict::no("shape " + to_string(p) + " has hq/hkv = " + std::to_string(p.heads_q) + "/" +
                       std::to_string(p.heads_kv) + " but the spec says gqa=" + std::to_string(s.gqa) +
                       "; accepted: hq = gqa * hkv");
  return Verdict::yes();
}

bool fused_q_gran(Gran g) {
  return g == Gran::per_token || g == Gran::per_warp || g == Gran::per_thread || g == Gran::per_block;
}

// Called for every attention() call: the spec-level conditions first, so an ineligible spec (per_tensor,
// smooth=q, rotated, packed int4) costs no validation and no reason string.
Tiling fused_q_form(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits) {
  if (!spec.quantized() || !fused_q_gran(spec.qk.gran) || fused_q_excluded(spec, tiling)) return tiling;
  Tiling t = tiling;
  t.q_fused = true;
  return validate(spec, t, limits) ? t : tiling;
}

Tiling tma_form(const Spec& spec, const Tiling& tiling, const DeviceLimits& limits) {
  if (!spec.quantized() || !tiling.wgmma || tiling.tma) return tiling;
  Tiling t = tiling;
  t.tma = true;
  return validate(spec, t, limits) ? t : tiling;
}

bool int4_mma_by_default(Arch arch) { return arch != Arch::sm_90 && arch != Arch::sm_90a && arch != Arch::unset; }

bool int4_mma_by_default(const Spec& s) {
  return s.phase == Phase::prefill && s.qk.fmt == Fmt::int4 && int4_mma_by_default(s.arch) && !(s.smooth & kSmoothQ);
}

std::string dispatch_note(const Spec& s) {
  if (s.phase != Phase::prefill || s.qk.fmt != Fmt::int4 || s.arch == Arch::unset || int4_mma_by_default(s))
    return "";
  Tiling int8_compute;
  return dispatch_note(s, int8_compute);
}

std::string dispatch_note(const Spec& s, const Tiling& t) {
  if (s.phase != Phase::prefill || s.qk.fmt != Fmt::int4 || s.arch == Arch::unset) return "";
  const std::string arch = to_string(s.arch);
  if (t.int4_mma && !int4_mma_by_default(s.arch))
    return "qk=int4 with _i4mma on " + arch + " runs packed INT4 mma.sync, which is emulated on Hopper (slow; "
           "meant for testing): the default there is int8 compute";
  if (!t.int4_mma && int4_mma_by_default(s.arch) && (s.smooth & kSmoothQ))
    return "qk=int4 with smooth=" + smooth_to_string(s.smooth) + " on " + arch +
           " runs as int8 compute: Q smoothing's ΔS product reads int8 K tiles (codes stay in [-7,7])";
  if (!t.int4_mma && int4_mma_by_default(s.arch))
    return "qk=int4 on " + arch + " runs as int8 compute because the tiling has no _i4mma (codes stay in [-7,7]); "
           "add _i4mma for the packed INT4 tensor cores";
  if (!t.int4_mma)
    return "qk=int4 on " + arch + " runs as int8 compute (INT4 mma.sync is emulated on Hopper); codes stay in [-7,7]";
  return "";
}

void require(const Verdict& v) {
  if (!v) throw_bad_input(v.reason);
}

}  // namespace qattn
