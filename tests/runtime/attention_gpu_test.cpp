// Every shipped attention kernel against the float64 reference, on fresh random data with channel
// outliers, outputs (and LSE) poisoned before each run: lengths 1, 17, 63, 65, 1000, 4097, causal with
// q_len != kv_len, GQA, both layouts, head dims 64, 96, 128 and 256. Thresholds: fp16/bf16 relative L2
// <= 5e-3; quantized (int8, fp8e4m3 Q/K) cosine >= 0.999, or the format's own error where it misses that.
// Each spec runs through attention() with its default tiling; where that is the wgmma form (int8 on
// sm_90a), the mma.sync form (what every other arch runs) is checked too, through prepare_with().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>

#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "runtime/registry/experiment_options.hpp"
#include "runtime/tuning/accuracy_gate.hpp"
#include "generator/search_space.hpp"
#include "qattn/validate.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "tests/common/attention_case.hpp"
#include "tests/common/attention_runs.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kernel_forms.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/score_error.hpp"
#include "tests/common/random_data.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;
using test::upload_call;
using test::Uploaded;
using test::view_of;
using test::Case;
using test::kCases;
using test::run_poisoned;
using test::values_differ;

const char* kSpecs[] = {
    "prefill qk=fp16 pv=fp16 out=fp16 d=128",
    "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
    "prefill qk=fp16 pv=fp16 out=fp16 d=64 causal",
    "prefill qk=bf16 pv=bf16 out=bf16 d=128 causal",
    "prefill qk=bf16 pv=bf16 out=bf16 d=64 gqa=4",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=k",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv",
    "prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=64 smooth=kv",
    "prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=64 causal smooth=k",
    "prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=128 causal smooth=k",
    "prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d=64 smooth=k",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal",
    // d 96 (rows of 12 chunks: the 4-chunk swizzle, 3 loads per cp.async pass, int8 tiles of 32-byte
    // atoms, wgmma P·V as n64 + n32) and d 256 (two 128-byte atoms, wgmma P·V as two n128).
    "prefill qk=fp16 pv=fp16 out=fp16 d=96",
    "prefill qk=fp16 pv=fp16 out=fp16 d=96 causal gqa=4",
    "prefill qk=bf16 pv=bf16 out=bf16 d=96 causal",
    "prefill qk=fp16 pv=fp16 out=fp16 d=256 causal",
    "prefill qk=bf16 pv=bf16 out=bf16 d=256 gqa=4",
    "prefill qk=bf16 pv=bf16 out=bf16 d=256 causal gqa=4",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=96 smooth=k",
    "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=96 causal gqa=4 smooth=kv",
    "prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=96 causal smooth=kv",
    "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=96 smooth=k",
    "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=256 causal smooth=kv",
    "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=256 gqa=4 smooth=k",
    "prefill qk=int8:per_tensor pv=int8:per_tensor out=bf16 d=256 causal smooth=k",
    "prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=256 causal",
    // per_warp / per_thread Q/K (group scales expanded per row, the per_token kernel): d 64 and 128,
    // causal and not, smooth k and kv, GQA.
    "prefill qk=int8:per_warp pv=int8:per_tensor out=fp16 d=128 smooth=k",
    "prefill qk=int8:per_warp pv=int8:per_channel out=bf16 d=128 causal gqa=4 smooth=kv",
    "prefill qk=int8:per_warp pv=int8:per_channel out=fp16 d=64 causal smooth=k",
    "prefill qk=int8:per_thread pv=int8:per_channel out=bf16 d=128 causal smooth=kv",
    "prefill qk=int8:per_thread pv=int8:per_tensor out=fp16 d=128 gqa=4 smooth=k",
    "prefill qk=int8:per_thread pv=int8:per_channel out=fp16 d=64 gqa=4 smooth=kv",
    // rotate=hadamard (Q and K rotated by the quantizers; the attention kernels are unchanged): the fp8
    // P·V format of the benchmark (wgmma and mma.sync on the H100), d 96's blocks of 32, and Q smoothing
    // with its rotated block means.
    "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=kv rotate=hadamard",
    "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=96 smooth=k rotate=hadamard",
    "prefill qk=int8:per_thread pv=int8:per_channel out=fp16 d=64 causal smooth=qkv rotate=hadamard",
    // qk=fp8e4m3 (e4m3 Q/K codes, e4m3 wgmma; sm_90a only: skipped elsewhere): per_token and per_block
    // (FlashAttention-3's and cuDNN's FP8 input), per_warp and per_tensor, with fp8 and int8 P·V, d 64 /
    // 128 / 256, causal, GQA, smoothing, rotation.
    "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 smooth=k",
    "prefill qk=fp8e4m3:per_block pv=fp8e4m3:per_channel out=bf16 d=128 causal gqa=4 smooth=kv",
    "prefill qk=fp8e4m3:per_token pv=int8:per_channel out=fp16 d=64 causal smooth=k",
    "prefill qk=fp8e4m3:per_warp pv=fp8e4m3:per_channel out=bf16 d=256 causal",
    "prefill qk=fp8e4m3:per_tensor pv=fp8e4m3:per_channel out=fp16 d=128 smooth=k",
    "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=k rotate=hadamard",
};

class AttentionVsReference : public test::GpuTest, public ::testing::WithParamInterface<const char*> {};

// A tensor's values in [b, h, s, d] order, whatever its layout (the format simulation's input).
std::vector<float> bhsd_floats(const HostTensor& t) {
  std::vector<float> out;
  out.reserve(t.data.size());
  for (int b = 0; b < t.shape.batch; ++b)
    for (int h = 0; h < t.shape.heads; ++h)
      for (int s = 0; s < t.shape.seq; ++s)
        for (int c = 0; c < t.shape.dim; ++c) out.push_back(static_cast<float>(t.at(b, h, s, c)));
  return out;
}

// Quantized output: cosine >= 0.999 against float64, or, where the format itself misses that on this
// draw (a float64 simulation of the same quantization on sampled rows), the accuracy gate's rule (b):
// the kernel's relative L2 on those rows at most kFormatErrorRatio x the format's + kFormatErrorSlack.
// A wrong kernel still fails; a short row set whose scales happen to be coarse does not.
void expect_quantized_accuracy(const Spec& spec, const Tiling& tiling, const Problem& p, const test::AttentionCase& data,
                               const HostTensor& got, const test::ErrorMetrics& m) {
  if (m.cosine >= 0.999) return;
  const reference::Dims dims{p.batch, p.heads_q, p.heads_kv, p.q_len, p.kv_len, spec.head_dim, spec.head_dim};
  const std::vector<reference::RowId> rows = reference::sample_rows(dims, 4, 256);
  std::vector<double> want, have;
  for (const reference::RowId& r : rows)
    for (int c = 0; c < spec.head_dim; ++c)
      want.push_back(data.ref.at(r.b, r.h, r.i, c)), have.push_back(got.at(r.b, r.h, r.i, c));
  const reference::ErrorMetrics format = reference::compare(
      want, rt::simulate_format_rows(spec, tiling, bhsd_floats(data.q), bhsd_floats(data.k), bhsd_floats(data.v), dims, rows));
  const reference::ErrorMetrics kernel = reference::compare(want, have);
  std::printf("[ metrics ] below the 0.999 floor: kernel %s | format alone %s\n", kernel.report().c_str(),
              format.report().c_str());
  EXPECT_LE(kernel.rel_l2, rt::kFormatErrorRatio * format.rel_l2 + rt::kFormatErrorSlack)
      << "cosine " << m.cosine << " below 0.999 and more than the format's own error explains";
}

using test::form_name;
using test::forms_to_check;

TEST_P(AttentionVsReference, EveryLengthLayoutAndMask) {
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;   // the default tiling here; tuned tilings are verified by the tuner itself
  Runtime runtime(options);
  const Spec parsed = parse_spec(GetParam());
  if (parsed.qk.fmt == Fmt::fp8e4m3 && runtime.resolve(Spec{}).arch != Arch::sm_90a)
    GTEST_SKIP() << "qk=fp8e4m3 runs on sm_90a (Hopper) only";
  const Spec spec = runtime.resolve(parsed);
  const Fmt io = spec.out;
  const int d = spec.head_dim;
  rt::Stream stream;
  for (const std::optional<Tiling>& form : forms_to_check(spec)) {
    for (const Case& c : kCases) {
      const std::uint64_t seed = test::fresh_seed();
      const Problem p{c.batch, c.heads_kv * spec.gqa, c.heads_kv, c.q_len, c.kv_len};
      SCOPED_TRACE(to_string(p) + " " + test::to_string(c.layout) + " " + form_name(form) + " " + test::seed_note(seed));
      const test::AttentionCase data = test::attention_case(p, d, spec.causal, c.layout, io, seed);
      const HostTensor &q = data.q, &k = data.k, &v = data.v, &ref = data.ref;
      const std::vector<double>& lse_ref = data.lse;

      Uploaded in = upload_call(spec, p, q, k, v);
      std::vector<float> lse_poison(lse_ref.size());
      test::fill_nan(lse_poison);
      rt::DeviceBuffer dlse = rt::DeviceBuffer::from(lse_poison);
      in.call.lse = dlse.as<float>();
      const HostTensor got = run_poisoned(runtime, in.call, ref, form, stream);
      const test::ErrorMetrics m = test::compare(ref, got);
      std::printf("[ metrics ] %-80s %-20s %-32s %s\n", GetParam(), form_name(form).c_str(),
                  (to_string(p) + " " + test::to_string(c.layout)).c_str(), m.report().c_str());
      EXPECT_EQ(m.nonfinite, 0);
      if (spec.quantized())
        expect_quantized_accuracy(spec, form ? *form : runtime.launch_form(spec, runtime.kernel(spec, p).tiling()), p, data,
                                  got, m);
      else
        EXPECT_LE(m.rel_l2, 5e-3) << m.report();

      // LSE (natural log; with K smoothing the runtime adds softmax_scale * q·mean_k back): rows without
      // keys -inf, the others within 1e-2 + 1e-3·|lse| of the float64 reference, plus for int8 the row's
      // score_error_bound (the input quantization's share, which no kernel can remove) and 2e-2 for the
      // 8-bit P in the row sum.
      std::vector<double> slack(lse_ref.size(), 0.0);
      if (spec.quantized()) {
        slack = test::score_error_bound(q, k, spec.qk.gran, spec.qk.gran == Gran::per_block ? 64 : 0,
                                        (spec.smooth & kSmoothK) != 0, spec.causal, 127, (spec.smooth & kSmoothQ) != 0,
                                        options.k_mean_sample_tokens,   // K's mean as the runtime takes it
                                        spec.rotate == Rotation::hadamard, spec.qk.fmt == Fmt::fp8e4m3);
        for (double& x : slack) x += 2e-2;
      }
      const std::vector<float> lse = dlse.to_vector<float>();
      double lse_err = 0;
      long long lse_bad = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(lse_ref[i])) lse_bad += !(std::isinf(lse[i]) && lse[i] < 0);
        else if (!std::isfinite(lse[i])) ++lse_bad;
        else lse_err = std::max(lse_err, std::fabs(lse[i] - lse_ref[i]) - 1e-3 * std::fabs(lse_ref[i]) - slack[i]);
      }
      std::printf("[ lse     ] %s %s %s: max error beyond the allowance: %.3e\n", GetParam(), form_name(form).c_str(),
                  to_string(p).c_str(), lse_err);
      EXPECT_EQ(lse_bad, 0);
      EXPECT_LE(lse_err, 1e-2);
    }
  }
}

// AttentionLongKeys: the smooth=kv per-token INT8 spec at d 64 and 128 on rows of tens of thousands of
// keys, every form of the kernel where the device has several, against the float64 reference.
class AttentionLongKeys : public test::GpuTest {
 protected:
  struct Data {
    HostTensor q, k, v;
  };
  static Data random_data(const Problem& p, int d, std::uint64_t seed) {
    return {test::random_tensor({1, p.heads_q, p.q_len, d}, Layout::bhsd, test::q_like(), seed),
            test::random_tensor({1, p.heads_kv, p.kv_len, d}, Layout::bhsd, test::k_like(), seed + 1),
            test::random_tensor({1, p.heads_kv, p.kv_len, d}, Layout::bhsd, test::v_like(), seed + 2)};
  }
  // Checks every form on `data`; channel0_max >= 0 also bounds channel 0's largest error.
  static void expect_every_form_matches(int d, const Problem& p, Data data, const char* label, double channel0_max) {
    RuntimeOptions options;
    options.use_cache = false;
    options.tune = false;
    Runtime runtime(options);
    const Spec spec = runtime.resolve(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=" +
                                                 std::to_string(d) + " smooth=kv"));
    for (HostTensor* t : {&data.q, &data.k, &data.v}) test::round_to(*t, Fmt::fp16);
    const HostTensor ref = test::reference_attention(data.q, data.k, data.v, {false, 0.0}, nullptr, Layout::bhsd);
    const Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
    rt::Stream stream;
    for (const std::optional<Tiling>& form : forms_to_check(spec)) {
      const HostTensor got = run_poisoned(runtime, in.call, ref, form, stream);
      const test::ErrorMetrics m = test::compare(ref, got);
      double channel0 = 0.0;
      for (int h = 0; h < p.heads_q; ++h)
        for (int i = 0; i < p.q_len; ++i) channel0 = std::max(channel0, std::fabs(got.at(0, h, i, 0) - ref.at(0, h, i, 0)));
      std::printf("[ metrics ] %s d %d %-24s %s channel 0 max error %.3e\n", label, d, form_name(form).c_str(),
                  m.report().c_str(), channel0);
      EXPECT_EQ(m.nonfinite, 0) << "d " << d << " " << form_name(form);
      EXPECT_GE(m.cosine, 0.999) << "d " << d << " " << form_name(form) << " " << m.report();
      if (channel0_max >= 0) {
        EXPECT_LE(channel0, channel0_max) << "d " << d << " " << form_name(form);
      }
    }
  }
};

// Past 32768 keys a row's 8-bit probabilities can sum past what the int32 accumulators hold, and the
// int8 kernel then halves O and the row sum (kLRescale / kLxRescale in prefill_int8/numerics.cuh; with smooth=kv
// the guard reads the exact row sum). Query row 0 of every head is zero, so its softmax is uniform over
// all 40000 keys: every P̂ is 255 and the halving must happen; the other rows are random.
TEST_F(AttentionLongKeys, UniformRowsPastTheRowSumLimit) {
  for (const int d : {64, 128}) {
    const Problem p{1, 2, 2, 8, 40000};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_note(seed));
    Data data = random_data(p, d, seed);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < d; ++c) data.q.at(0, h, 0, c) = 0.0;
    expect_every_form_matches(d, p, std::move(data), "long keys", -1.0);
  }
}

// What the guard is for: rows whose int32 O would pass 2^31 without it. 140000 keys, half of them (+)
// with K = +e0 and V channel 0 = +1, the other half K = -e0 and -1 (the means are 0, so smoothing leaves
// them; K and V's channel 0 quantize to +-127); every query is 64 in channel 0 alone, so each row attends
// to the + keys only (logits +-8), all at one logit: the first tile sets R for good (a raise of R would
// halve O on its own), every P̂ is 255, and 70000 · 255 · 127 = 2.27e9 > 2^31. Channel 0 of the output
// is then +1; an overflowed O wraps it to about -0.9. (The uniform rows above never pass 2^31: random V.)
TEST_F(AttentionLongKeys, AccumulatorPastTwoToThe31IsHalvedInRange) {
  for (const int d : {64, 128}) {
    const Problem p{1, 1, 1, 8, 140000};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_note(seed));
    Data data = random_data(p, d, seed);
    for (int i = 0; i < p.q_len; ++i)
      for (int c = 0; c < d; ++c) data.q.at(0, 0, i, c) = c == 0 ? 64.0 : 0.0;
    for (int t = 0; t < p.kv_len; ++t) {
      const double sign = t < p.kv_len / 2 ? 1.0 : -1.0;
      for (int c = 0; c < d; ++c) data.k.at(0, 0, t, c) = c == 0 ? sign : 0.0;
      data.v.at(0, 0, t, 0) = sign;
    }
    expect_every_form_matches(d, p, std::move(data), "int32 range", 0.05);
  }
}

// The causal wgmma form's schedule (tile_order.h) only reorders CTAs: bands of 3 over 2 x 4 heads (the
// last band one CTA per tile past the last head, which must exit without writing), one band, head by
// head and the automatic width give the same bits, and those match the float64 reference. q_len !=
// kv_len, GQA 2, both layouts. On other archs the spec runs the mma.sync form, which has no bands.
class AttentionCausalBands : public test::GpuTest {};

TEST_F(AttentionCausalBands, EveryBandWidthGivesTheSameOutput) {
  const Spec request = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=kv");
  const Problem p{2, 4, 2, 1000, 1100};
  for (Layout layout : {Layout::bshd, Layout::bhsd}) {
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(test::to_string(layout)) + " " + test::seed_note(seed));
    const test::AttentionCase data = test::attention_case(p, 128, true, layout, request.out, seed);
    std::vector<HostTensor> outs;
    for (int band : {0, 1, 3, 8}) {
      RuntimeOptions options;
      options.use_cache = false;
      options.tune = false;
      Runtime runtime(options);
      rt::experiment_options(runtime).causal_band_heads = band;
      const Spec spec = runtime.resolve(request);
      const Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
      rt::Stream stream;
      outs.push_back(run_poisoned(runtime, in.call, data.ref, std::nullopt, stream));
      const test::ErrorMetrics m = test::compare(data.ref, outs.back());
      std::printf("[ metrics ] causal band %d %s %s\n", band, test::to_string(layout), m.report().c_str());
      EXPECT_EQ(m.nonfinite, 0) << "band " << band;
      EXPECT_GE(m.cosine, 0.999) << "band " << band << " " << m.report();
    }
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_EQ(values_differ(outs[i], outs[0]), 0u) << "band run " << i << " against the automatic width";
  }
}

// rt::ExperimentOptions::concurrent_passes (the default): V's quantization passes on a side stream of the
// runtime's, and Q's on a second one where Q has passes (smooth=q), give the same bits as every pass on
// the caller's stream, also where K and V both use the scratch of a per_tensor scale. And the side
// streams are ordered after the caller's earlier work: V is rewritten on the caller's stream (a
// device-to-device copy behind a slow fill) just before the call, so passes that did not wait would read
// the old V, and an attention kernel that did not wait for them would read codes still being written
// (measured on the H100: builds without either wait fail here).
class AttentionConcurrentPasses : public test::GpuTest {};

TEST_F(AttentionConcurrentPasses, SameBitsAsOneStreamAndOrderedAfterTheCallersWork) {
  const char* specs[] = {
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=64 smooth=kv",
      "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 causal",
      "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 smooth=k",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=qkv",   // Q, K and V passes
  };
  rt::DeviceBuffer slow(size_t{512} << 20);   // a fill of 512 MiB queued before the new V: ~0.2 ms
  for (const char* text : specs) {
    const Spec request = parse_spec(text);
    const Problem p{2, 4 * request.gqa, 4, 1000, 4097};
    const std::uint64_t seed = test::fresh_seed();   // the same data for both runtimes
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const test::AttentionCase data = test::attention_case(p, request.head_dim, request.causal, Layout::bshd, request.out, seed);
    HostTensor old_v = test::random_tensor(data.v.shape, Layout::bshd, test::v_like(), seed + 1);
    test::round_to(old_v, request.out);
    std::vector<HostTensor> outs;
    for (bool concurrent : {false, true}) {
      RuntimeOptions options;
      options.use_cache = false;
      options.tune = false;
      Runtime runtime(options);
      rt::experiment_options(runtime).concurrent_passes = concurrent;
      const Spec spec = runtime.resolve(request);
      Uploaded in = upload_call(spec, p, data.q, data.k, old_v);
      rt::Stream stream;
      // A first call on the old V, then the new V behind the slow fill, then the checked call.
      std::vector<std::uint16_t> poison(static_cast<size_t>(test::storage_size(data.ref.shape, data.ref.strides)));
      test::fill_nan(poison, spec.out);
      rt::DeviceBuffer dout = rt::DeviceBuffer::from(poison);
      AttentionCall call = in.call;
      call.o = view_of(dout, data.ref);
      runtime.attention(call, stream.get());
      const rt::DeviceBuffer new_v = upload(data.v, spec.out);
      stream.synchronize();
      dout.upload(poison.data(), poison.size() * sizeof(std::uint16_t));
      slow.fill_async(0x5a, stream.get());
      rt::check(rt::driver().cuMemcpyDtoDAsync(in.v.ptr(), new_v.ptr(), new_v.size(), stream.get()), "cuMemcpyDtoDAsync");
      runtime.attention(call, stream.get());
      stream.synchronize();
      outs.push_back(test::decode(dout.to_vector<std::uint16_t>().data(), data.ref.shape, data.ref.strides, spec.out));
      const test::ErrorMetrics m = test::compare(data.ref, outs.back());
      std::printf("[ metrics ] concurrent passes %d %-72s %s\n", concurrent, text, m.report().c_str());
      EXPECT_EQ(m.nonfinite, 0);
      // Against the reference of the new V: the quantization's own floors (int4 QK: a sanity bound).
      EXPECT_GE(m.cosine, spec.qk.fmt == Fmt::int4 ? 0.95 : 0.999) << m.report();
    }
    EXPECT_EQ(values_differ(outs[0], outs[1]), 0u) << text << ": the side stream's passes against one stream's";
  }
}

// Tensors whose rows the kernel cannot access are refused with a bad-input error before anything is
// queued (a misaligned access would end the CUDA context): the output of attention() and run() (4-byte
// pairs for the int8 kernel, 16-byte chunks for the FP16 kernel) and the FP16 kernel's inputs. The poisoned
// output stays untouched, and the same runtime then serves an aligned call.
class AttentionLayout : public test::GpuTest {};

TEST_F(AttentionLayout, MisalignedTensorsAreRefusedBeforeLaunching) {
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;
  Runtime runtime(options);
  const Problem p{1, 2, 2, 65, 65};
  rt::Stream stream;
  for (const char* text : {"prefill qk=fp16 pv=fp16 out=fp16 d=64", "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv"}) {
    const Spec spec = runtime.resolve(parse_spec(text));
    SCOPED_TRACE(text);
    const std::uint64_t seed = test::fresh_seed();
    const test::AttentionCase data = test::attention_case(p, 64, false, Layout::bshd, spec.out, seed);
    const Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
    // One spare row of room, so that a shifted view stays inside the buffer.
    std::vector<std::uint16_t> poison(static_cast<size_t>(test::storage_size(data.ref.shape, data.ref.strides)) + 128);
    test::fill_nan(poison, spec.out);
    rt::DeviceBuffer dout = rt::DeviceBuffer::from(poison);
    AttentionCall call = in.call;
    call.o = view_of(dout, data.ref);
    TensorView bad = call.o;
    bad.data = static_cast<char*>(bad.data) + 2;   // every row starts 2 bytes off
    AttentionCall shifted = call;
    shifted.o = bad;
    const std::string o_rule = spec.quantized() ? "4-byte aligned" : "16-byte aligned";
    test::expect_bad_input([&] { runtime.attention(shifted, stream.get()); }, o_rule);
    const auto prepared = runtime.prepare(call, stream.get());
    test::expect_bad_input([&] { runtime.run(*prepared, bad, 0.f, nullptr, stream.get()); }, o_rule);
    if (!spec.quantized()) {
      AttentionCall k_off = call;
      k_off.k.data = static_cast<char*>(k_off.k.data) + 2;
      test::expect_bad_input([&] { runtime.prepare(k_off, stream.get()); }, "reads k in 16-byte chunks");
    }
    stream.synchronize();
    EXPECT_EQ(dout.to_vector<std::uint16_t>(), poison) << "a refused call wrote to the output";
    // The context is fine: the aligned call runs and matches the reference.
    runtime.run(*prepared, call.o, 0.f, nullptr, stream.get());
    stream.synchronize();
    const HostTensor got = test::decode(dout.to_vector<std::uint16_t>().data(), data.ref.shape, data.ref.strides, spec.out);
    const test::ErrorMetrics m = test::compare(data.ref, got);
    std::printf("[ metrics ] layout %-60s %s\n", text, m.report().c_str());
    EXPECT_EQ(m.nonfinite, 0);
    EXPECT_GE(m.cosine, 0.999) << m.report();
  }
}

std::string param_name(const ::testing::TestParamInfo<const char*>& info) {
  Spec s = parse_spec(info.param);
  s.arch = Arch::sm_90a;
  return spec_name(s).substr(std::string("qattn_prefill_sm90a_").size());
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionVsReference, ::testing::ValuesIn(kSpecs), param_name);

}  // namespace
}  // namespace qattn
