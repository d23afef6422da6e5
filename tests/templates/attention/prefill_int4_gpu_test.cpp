// Prefill qk=int4 (issue #3) on the GPU.
//  1. The quantizer with qmax 7, packed (two codes per byte: what the packed-int4 kernel reads) and
//     one code per byte (what the int8-compute form reads), against the float64 quantizer code for code,
//     for every Q/K granularity (Q and K mappings), smoothing on and off, d 64 / 96 / 128 / 256; the
//     packed bytes equal the packing of the unpacked codes.
//  2. Attention with int4 Q/K and int8 P·V (per-channel V) for every granularity x d {64, 96, 128, 256}
//     x causal (GQA 2 when causal), against the float64 reference, LSE within the quantization's own
//     bound, in two settings: smooth=k on K channel bias 5-20 and a few x10 Q channels (scaled channels
//     are not smoothable), and SageAttention2's smooth=qk on Q channels offset by 5-20. INT4 is lossy and
//     its loss varies from draw to draw, so the output is held to the format's own error on the same
//     data (the accuracy gate's rule: relative L2 <= 1.25 x the float64 format simulation's + 0.02,
//     runtime/tuning/accuracy_gate.hpp), not to a fixed cosine. The smooth=k points run in both forms whatever the
//     GPU: packed int4 (_i4mma; forced on sm_90, where it is emulated, to check it) and int8 compute
//     (the default on sm_90 / sm_90a, wgmma there). Lengths are sampled from 1, 63, 65, 1000, 4097 and
//     q_len != kv_len to keep the test in seconds.
//  3. Both forms with the same mma.sync tiling on the same inputs give bit-identical outputs (the same
//     codes make the same integer scores; everything after Q·K^T is shared code).
// Outputs and LSE are NaN-poisoned first. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "qattn/kernel_name.hpp"
#include "generator/quant_plan.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/device/module.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/pass_cache.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"
#include "reference/attention.hpp"
#include "runtime/tuning/accuracy_gate.hpp"
#include "tests/common/reference_attention.hpp"
#include "tests/common/score_error.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;
using test::view_of;

const Gran kGrans[] = {Gran::per_tensor, Gran::per_block, Gran::per_warp, Gran::per_thread, Gran::per_token};

// ---- 1. the quantizer --------------------------------------------------------------------------

class Int4Quantizer : public test::GpuTest {
 protected:
  // Compiled once per kernel name for the device under test (tests/common/pass_cache.hpp).
  const rt::Kernel& pass(const gen::Source& src) { return passes_.get(src, kDevice); }

  // Quantizes x (fp16, bshd) with the request on the GPU; returns the raw output bytes, rows of
  // row_bytes, and the scales / mean through the out parameters.
  std::vector<std::int8_t> quantize(const HostTensor& x, const gen::QuantRequest& req, int row_bytes,
                                    std::vector<float>& scales, std::vector<float>& mean, ScaleRef& sref) {
    const gen::QuantProblem prob{x.shape.batch, x.shape.heads, x.shape.seq, x.shape.seq};
    const gen::QuantPlan plan = gen::plan_quant(req, prob);
    test::QuantRun run = test::prepare_quant_run(x, Fmt::fp16, req, prob, plan, row_bytes);
    const QuantParams& qp = run.qp;
    EXPECT_EQ(gen::quant_params_error(req, qp), "");
    test::run_quant_plan(passes_, req, plan, qp, kDevice);
    scales = run.scale.to_vector<float>();
    mean = run.mean.to_vector<float>();
    sref = qp.scale;
    return run.y.to_vector<std::int8_t>();
  }

  test::PassCache passes_;
};

TEST_F(Int4Quantizer, PackedAndUnpackedCodesMatchTheReference) {
  int cases = 0;
  for (Gran g : kGrans)
    for (int group : {32, 64})   // per_warp / per_thread: the Q (32) and K (64) mappings; per_block: 64
      for (bool smooth : {false, true})
        for (int d : {64, 96, 128, 256})
          for (int seq : {1, 65, 1000}) {
            const bool fragment = g == Gran::per_warp || g == Gran::per_thread;
            if (!fragment && group == 32) continue;
            const int grp = fragment || g == Gran::per_block ? group : 0;
            const std::uint64_t seed = test::fresh_seed();
            SCOPED_TRACE(std::string(to_string(g)) + " group=" + std::to_string(grp) + (smooth ? " smooth" : "") +
                         " d=" + std::to_string(d) + " seq=" + std::to_string(seq) + " " + test::seed_note(seed));
            HostTensor x = test::random_tensor({2, 2, seq, d}, Layout::bshd, test::k_like(), seed);
            test::round_to(x, Fmt::fp16);
            gen::QuantRequest req{Fmt::fp16, g, grp, smooth, false, d};
            req.qmax = 7;
            std::vector<float> s1, m1, s2, m2;
            ScaleRef r1{}, r2{};
            const std::vector<std::int8_t> bytes = quantize(x, req, d, s1, m1, r1);
            req.pack4 = true;
            const std::vector<std::int8_t> packed = quantize(x, req, d / 2, s2, m2, r2);
            const test::QuantRef ref = test::quantize_reference(x, {g, grp, 7, smooth});
            test::QuantizedView view;
            view.codes = bytes.data();
            view.strides = test::Strides{2LL * seq * d, 1LL * seq * d, d, 1};
            view.seq_pad = seq;
            view.scales = s1.data();
            view.scale_sb = r1.sb;
            view.scale_sh = r1.sh;
            view.mean = smooth ? m1.data() : nullptr;
            const test::QuantCheck c1 = test::check_quantized(x, ref, view);
            EXPECT_TRUE(c1.ok()) << "int4 codes one per byte: " << c1.report();
            // The packed bytes are exactly the packing of the unpacked codes, with the same scales.
            const std::vector<std::uint8_t> packed_u(packed.begin(), packed.end());
            const std::vector<std::int8_t> unpacked = test::unpack_int4(packed_u, d);
            EXPECT_EQ(unpacked, bytes);
            EXPECT_EQ(s1, s2);
            for (std::int8_t c : unpacked) ASSERT_LE(std::abs(static_cast<int>(c)), 7);
            for (float s : s2) ASSERT_TRUE(std::isfinite(s));
            ++cases;
          }
  std::printf("[ int4 quant ] %d cases\n", cases);
}

// ---- 2. attention against the float64 reference ------------------------------------------------

struct Case {
  int batch, heads_kv, q_len, kv_len;
  Layout layout;
};
// Sampled in turn by the points (two each): every length of the issue, q_len != kv_len both ways.
const Case kCases[] = {
    {1, 2, 1, 1, Layout::bshd},       {1, 2, 63, 63, Layout::bhsd},    {1, 2, 65, 65, Layout::bshd},
    {1, 2, 1000, 1000, Layout::bhsd}, {1, 1, 4097, 4097, Layout::bshd}, {1, 2, 65, 1000, Layout::bhsd},
    {2, 1, 1, 333, Layout::bshd},     {1, 2, 1000, 65, Layout::bhsd},
};


// The packed-int4 tiling the test forces where the device's default is int8 compute: sm_89's default
// (its shared memory fits every GPU from sm_80 on).
Tiling packed_tiling(const Spec& spec) {
  Spec s = spec;
  s.arch = Arch::sm_89;
  return default_tiling(s, default_limits(Arch::sm_89));
}

// nullopt = attention() with the default tiling; then the other form with a fixed tiling.
std::vector<std::optional<Tiling>> forms(const Spec& spec) {
  std::optional<Tiling> other;
  if (int4_mma_by_default(spec.arch)) {
    Tiling t = default_tiling(spec, default_limits(spec.arch));
    t.int4_mma = false;   // int8 compute on the same mma.sync tiling
    other = t;
  } else {
    other = packed_tiling(spec);
  }
  return {std::nullopt, other};
}

std::string form_name(const std::optional<Tiling>& f) { return f ? to_string(*f) : "default"; }

// A [b, h, s, d] float copy of a test tensor (the format simulation's input order).
std::vector<float> bhsd_floats(const HostTensor& t) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(t.shape.numel()));
  for (int b = 0; b < t.shape.batch; ++b)
    for (int h = 0; h < t.shape.heads; ++h)
      for (int s = 0; s < t.shape.seq; ++s)
        for (int c = 0; c < t.shape.dim; ++c) out.push_back(static_cast<float>(t.at(b, h, s, c)));
  return out;
}

// The kernel's output and the format's float64 simulation, both against the reference, on up to 4 heads x
// 256 rows; passed: the accuracy gate's rule (b) bound on the kernel's relative L2.
struct FormatCheck {
  reference::ErrorMetrics kernel, format;
  double bound = 0;
  bool passed() const { return kernel.nonfinite == 0 && kernel.rel_l2 <= bound; }
  std::string report() const {
    return "kernel " + kernel.report() + " | format alone " + format.report() + " | bound relL2 " + std::to_string(bound);
  }
};
FormatCheck format_check(const Spec& spec, const Tiling& tiling, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                         const HostTensor& ref, const HostTensor& got) {
  const reference::Dims dims{q.shape.batch, q.shape.heads, k.shape.heads, q.shape.seq, k.shape.seq, q.shape.dim, v.shape.dim};
  const std::vector<reference::RowId> rows = reference::sample_rows(dims, 4, 256);
  std::vector<double> want, have;
  for (const reference::RowId& r : rows)
    for (int c = 0; c < dims.dv; ++c) want.push_back(ref.at(r.b, r.h, r.i, c)), have.push_back(got.at(r.b, r.h, r.i, c));
  FormatCheck f;
  f.kernel = reference::compare(want, have);
  f.format = reference::compare(want, rt::simulate_format_rows(spec, tiling, bhsd_floats(q), bhsd_floats(k), bhsd_floats(v), dims, rows));
  f.bound = rt::kFormatErrorRatio * f.format.rel_l2 + rt::kFormatErrorSlack;
  return f;
}

class Int4AttentionBase : public test::GpuTest {
 protected:
  // One call into NaN-poisoned O and LSE; returns O (decoded) and fills lse.
  HostTensor run(Runtime& runtime, const AttentionCall& base, const HostTensor& ref, const std::optional<Tiling>& form,
                 std::vector<float>& lse, rt::Stream& stream) {
    AttentionCall call = base;
    std::vector<std::uint16_t> poison(static_cast<size_t>(test::storage_size(ref.shape, ref.strides)));
    test::fill_nan(poison, Fmt::fp16);
    rt::DeviceBuffer dout = rt::DeviceBuffer::from(poison);
    test::fill_nan(lse);
    rt::DeviceBuffer dlse = rt::DeviceBuffer::from(lse);
    call.o = view_of(dout, ref);
    call.lse = dlse.as<float>();
    if (form) {
      const auto prepared = runtime.prepare_with(call, *form, stream.get());
      runtime.run(*prepared, call.o, 0.f, call.lse, stream.get());
    } else {
      runtime.attention(call, stream.get());
    }
    stream.synchronize();
    lse = dlse.to_vector<float>();
    return test::decode(dout.to_vector<std::uint16_t>().data(), ref.shape, ref.strides, Fmt::fp16);
  }
};

class Int4Attention : public Int4AttentionBase, public ::testing::WithParamInterface<Gran> {};
class Int4Forms : public Int4AttentionBase {};

TEST_P(Int4Attention, EveryHeadDimMaskAndFormAgainstTheReference) {
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;
  Runtime runtime(options);
  rt::Stream stream;
  const Gran g = GetParam();
  int turn = static_cast<int>(g);   // a different sample of cases per granularity
  // Two configurations: (a) smooth=k on x10-scaled Q channels, both forms (packed int4 and int8
  // compute) checked against each other and the reference; (b) SageAttention2's 4-bit setting, smooth=qk,
  // on Q whose large channels are offsets (as in LLM queries; Q smoothing removes them), the issue's
  // floor cos >= 0.995. Scaled Q channels are not removable by any smoothing: a x10 channel leaves the
  // others ~1 code of [-7, 7] per token, so (a) gets a floor under its measured H100 values (0.96 .. 0.995)
  // instead; calibrate (issue 3, item 5) is what keeps such layers at 8 bits.
  double rel_l1_sum[2] = {0, 0};   // (a)'s default form over its draws: unrotated, rotated
  for (bool sage4 : {false, true})
  for (int d : {64, 96, 128, 256})
    for (bool causal : {false, true}) {
      Spec spec = parse_spec(std::string("prefill qk=int4:") + to_string(g) + " pv=int8:per_channel out=fp16 d=" +
                             std::to_string(d) + (causal ? " causal gqa=2" : "") + (sage4 ? " smooth=qk" : " smooth=k"));
      spec = runtime.resolve(spec);
      if (const std::string note = dispatch_note(spec); !note.empty()) std::printf("[ note    ] %s\n", note.c_str());
      for (int n = 0; n < 2; ++n) {
        const Case& c = kCases[static_cast<size_t>(turn++) % (sizeof(kCases) / sizeof(kCases[0]))];
        if (d == 256 && c.kv_len > 1000) continue;   // the float64 reference's time, not the kernel's
        const std::uint64_t seed = test::fresh_seed();
        const Problem p{c.batch, c.heads_kv * spec.gqa, c.heads_kv, c.q_len, c.kv_len};
        SCOPED_TRACE(to_string(spec) + " " + to_string(p) + " " + test::to_string(c.layout) + " " + test::seed_note(seed));
        test::RandomSpec q_spec = test::q_like();
        if (sage4) {   // the large Q channels as offsets (same sizes as K's bias)
          q_spec.outliers = test::Outliers{};
          q_spec.outliers.biased_channels = 4;
        }
        HostTensor q = test::random_tensor({p.batch, p.heads_q, p.q_len, d}, c.layout, q_spec, seed);
        HostTensor k = test::random_tensor({p.batch, p.heads_kv, p.kv_len, d}, c.layout, test::k_like(), seed + 1);
        HostTensor v = test::random_tensor({p.batch, p.heads_kv, p.kv_len, d}, c.layout, test::v_like(), seed + 2);
        for (HostTensor* t : {&q, &k, &v}) test::round_to(*t, Fmt::fp16);
        std::vector<double> lse_ref;
        const HostTensor ref = test::reference_attention(q, k, v, {spec.causal, 0.0}, &lse_ref, c.layout);
        std::vector<double> slack = test::score_error_bound(q, k, g, g == Gran::per_block ? 64 : 0, true, spec.causal, 7, sage4,
                                                            options.k_mean_sample_tokens);   // K's mean as the runtime takes it
        const test::Uploaded in = test::upload_call(spec, p, q, k, v);   // out=fp16: fp16 inputs
        const AttentionCall& call = in.call;
        // LSE: -inf for rows without keys; otherwise within the int4 quantization's own bound on the
        // scores (`bound`), 2e-2 for the 8-bit P in the row sum, and 1e-2 + 1e-3·|lse|.
        auto check_lse = [&](const std::vector<float>& lse, const std::vector<double>& bound, const std::string& what) {
          long long bad = 0;
          double worst = 0;
          size_t worst_row = 0;
          for (size_t i = 0; i < lse.size(); ++i) {
            if (std::isinf(lse_ref[i])) bad += !(std::isinf(lse[i]) && lse[i] < 0);
            else if (!std::isfinite(lse[i])) ++bad;
            else {
              const double e = std::fabs(lse[i] - lse_ref[i]) - 1e-3 * std::fabs(lse_ref[i]) - bound[i] - 2e-2;
              if (e > worst) worst = e, worst_row = i;
            }
          }
          EXPECT_EQ(bad, 0) << what;
          EXPECT_LE(worst, 1e-2) << what << ": row " << worst_row << " of " << lse.size() << " (b, h, i order): lse "
                                 << lse[worst_row] << ", reference " << lse_ref[worst_row] << ", score bound "
                                 << bound[worst_row];
        };
        std::vector<HostTensor> outs;
        std::vector<test::ErrorMetrics> metrics;
        const std::vector<std::optional<Tiling>> run_forms =
            sage4 ? std::vector<std::optional<Tiling>>{std::nullopt} : forms(spec);   // smooth=q: int8 compute only
        for (const std::optional<Tiling>& form : run_forms) {
          std::vector<float> lse(lse_ref.size());
          outs.push_back(run(runtime, call, ref, form, lse, stream));
          const test::ErrorMetrics m = test::compare(ref, outs.back());
          metrics.push_back(m);
          std::printf("[ metrics ] %-62s %-22s %-26s cos=%.6f relL1=%.3e rmse=%.3e\n", to_string(spec).c_str(),
                      form_name(form).c_str(), (to_string(p) + " " + test::to_string(c.layout)).c_str(), m.cosine,
                      m.rel_l1, m.rmse);
          EXPECT_EQ(m.nonfinite, 0) << form_name(form);
          const Tiling launched = form ? *form : default_tiling(spec, default_limits(spec.arch));
          const FormatCheck fc = format_check(spec, launched, q, k, v, ref, outs.back());
          std::printf("[ format  ] %s\n", fc.report().c_str());
          EXPECT_TRUE(fc.passed()) << form_name(form) << " " << fc.report();
          check_lse(lse, slack, form_name(form));
        }
        // rotate=hadamard on the x10-channel inputs of (a) (per_tensor has no rotation): the same call with
        // Q and K rotated before quantization spreads the large channels. Per draw it need not win (a
        // 1-row or 333-key draw at d 64, with 2 large channels, measured 5-14% more rel L1 rotated on
        // the H100), so the gain is asserted over the granularity's draws below; per draw, a floor.
        if (!sage4 && g != Gran::per_tensor) {
          Spec rot_spec = spec;
          rot_spec.rotate = Rotation::hadamard;
          AttentionCall rot_call = call;
          rot_call.spec = rot_spec;
          std::vector<float> lse(lse_ref.size());
          const HostTensor out = run(runtime, rot_call, ref, std::nullopt, lse, stream);
          const test::ErrorMetrics m = test::compare(ref, out);
          std::printf("[ metrics ] %-62s %-22s %-26s cos=%.6f relL1=%.3e rmse=%.3e\n", to_string(rot_spec).c_str(),
                      "default", (to_string(p) + " " + test::to_string(c.layout)).c_str(), m.cosine, m.rel_l1, m.rmse);
          EXPECT_EQ(m.nonfinite, 0);
          const FormatCheck fc = format_check(rot_spec, default_tiling(rot_spec, default_limits(rot_spec.arch)), q, k, v, ref, out);
          std::printf("[ format  ] rotated %s\n", fc.report().c_str());
          EXPECT_TRUE(fc.passed()) << fc.report();
          rel_l1_sum[0] += metrics[0].rel_l1, rel_l1_sum[1] += m.rel_l1;
          check_lse(lse, test::score_error_bound(q, k, g, g == Gran::per_block ? 64 : 0, true, spec.causal, 7, false,
                                                 options.k_mean_sample_tokens, true),
                    "rotated");
        }
        // The two forms on the same codes: the default and the other form may differ in tiling (the
        // running max moves at other tile borders, so P̂ is rounded on another grid), so near-identical,
        // not equal: flat rows, where P̂'s rounding is most of the error, measured 0.99987 on the H100.
        if (outs.size() == 2) {
          const test::ErrorMetrics between = test::compare(outs[0], outs[1]);
          EXPECT_GE(between.cosine, 0.9995) << between.report();
        }
      }
    }
  // The rotation's gain over (a)'s draws (per_tensor: none run): measured on the H100, the mean rel L1
  // fell to 0.50-0.56 of the unrotated one per granularity over two runs.
  if (g != Gran::per_tensor) {
    std::printf("[ rotate  ] %s: summed rel L1 of the x10-channel draws unrotated %.4f, rotated %.4f\n", to_string(g),
                rel_l1_sum[0], rel_l1_sum[1]);
    EXPECT_LE(rel_l1_sum[1], 0.75 * rel_l1_sum[0]);
  }
}

// ---- 3. packed int4 and int8 compute, same tiling, same inputs: the same bits ------------------

TEST_F(Int4Forms, PackedAndInt8ComputeAgreeBitForBitOnOneTiling) {
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;
  Runtime runtime(options);
  rt::Stream stream;
  for (int d : {64, 96, 128, 256}) {
    const Spec spec = runtime.resolve(parse_spec("prefill qk=int4:per_token pv=int8:per_channel out=fp16 d=" +
                                                 std::to_string(d) + " causal smooth=k"));
    const Problem p{1, 2, 2, 333, 333};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("d=" + std::to_string(d) + " " + test::seed_note(seed));
    HostTensor q = test::random_tensor({1, 2, p.q_len, d}, Layout::bshd, test::q_like(), seed);
    HostTensor k = test::random_tensor({1, 2, p.kv_len, d}, Layout::bshd, test::k_like(), seed + 1);
    HostTensor v = test::random_tensor({1, 2, p.kv_len, d}, Layout::bshd, test::v_like(), seed + 2);
    for (HostTensor* t : {&q, &k, &v}) test::round_to(*t, Fmt::fp16);
    const HostTensor shape_ref = HostTensor::zeros(q.shape, Layout::bshd);
    const test::Uploaded in = test::upload_call(spec, p, q, k, v);   // out=fp16: fp16 inputs
    const AttentionCall& call = in.call;
    Tiling packed = packed_tiling(spec), int8c = packed;
    int8c.int4_mma = false;
    std::vector<float> lse_a(static_cast<size_t>(2 * p.q_len)), lse_b(lse_a.size());
    const HostTensor a = run(runtime, call, shape_ref, packed, lse_a, stream);
    const HostTensor b = run(runtime, call, shape_ref, int8c, lse_b, stream);
    const test::ErrorMetrics m = test::compare(a, b);
    std::printf("[ forms   ] d=%d %s vs %s: %s\n", d, to_string(packed).c_str(), to_string(int8c).c_str(), m.report().c_str());
    EXPECT_EQ(m.max_abs, 0.0) << m.report();
    EXPECT_EQ(m.nonfinite, 0);
    EXPECT_EQ(lse_a, lse_b);
  }
}

std::string gran_name(const ::testing::TestParamInfo<Gran>& info) { return to_string(info.param); }

INSTANTIATE_TEST_SUITE_P(Grans, Int4Attention, ::testing::ValuesIn(kGrans), gran_name);

}  // namespace
}  // namespace qattn
