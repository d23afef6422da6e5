// Decode over a FlashQ cache (TurboAttention: INT4/INT2 per-channel blocks with per-head bit widths, plus
// the INT8 buffer of the newest tokens) on the GPU, against the float64 reference on the dequantized
// cache (tests/common/flashq_reference.hpp).
//
// The caches are built by the host model (prefill, then a decode step's append, which may flush), so
// this test checks the decode alone; the pack kernels are checked against the same model byte for byte
// in flashq_pack_gpu_test.cpp, and the last test here runs the whole device path (prefill, appends with
// flushes, decode). Both dataflows (mma, gemv), mixed bit widths per head (K and V differ), contiguous
// and paged, causal with several new tokens, ragged lengths around the 64-token block, d 64 / 128 / 256,
// split counts.
// Thresholds as for the other caches (decode_gpu_test.cpp): the reference sees the values the cache
// holds, and every code enters the tensor cores as an exact integer with the block scales in fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/flashq_reference.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostFlashQCache;

struct FqCase {
  std::string spec;            // without paged / flow (added from the fields)
  std::vector<int> k_bits, v_bits;
  int q_len = 1;
  std::vector<int> prefill_lens;   // tokens per sequence before the decode step (the step adds q_len)
  bool paged = false;
  bool gemv = false;
  int splits = 0;
  double softmax_scale = 0;   // 0: 1/sqrt(d)
  UnifiedMax unified_max{};   // softmax=unified_max
};

struct FqResult {
  std::vector<double> out, lse, ref, ref_lse;
  test::ErrorMetrics metrics;
  double lse_max_abs = 0;
  long long fallback_rows = -1;   // softmax=unified_max: rows the exact kernel recomputed
};

std::vector<float> as_floats(const test::HostTensor& t) {
  const std::vector<double> v = t.logical();
  return std::vector<float>(v.begin(), v.end());
}

// Device copies of a host cache, and the view over them.
struct DeviceFlashQ {
  rt::DeviceBuffer k_blocks, v_blocks, k_buffer, v_buffer, heads, compressed, buffered, table, k_scale, v_scale;
  FlashQCacheView view;

  explicit DeviceFlashQ(const HostFlashQCache& c)
      : k_blocks(rt::DeviceBuffer::from(c.k_blocks)), v_blocks(rt::DeviceBuffer::from(c.v_blocks)),
        k_buffer(rt::DeviceBuffer::from(c.k_buffer.bytes)), v_buffer(rt::DeviceBuffer::from(c.v_buffer.bytes)),
        heads(rt::DeviceBuffer::from(c.head_table())), compressed(rt::DeviceBuffer::from(c.compressed_lens)),
        buffered(rt::DeviceBuffer::from(c.buffer_lens)),
        table(rt::DeviceBuffer::from(c.paged ? c.block_table : std::vector<int>{0})),
        k_scale(rt::DeviceBuffer::from(c.k_scale8)), v_scale(rt::DeviceBuffer::from(c.v_scale8)) {
    view.k_blocks = k_blocks.as<void>();
    view.v_blocks = v_blocks.as<void>();
    view.k_page_stride = c.k_page_stride;
    view.v_page_stride = c.v_page_stride;
    if (c.paged) {
      view.block_table = table.as<int>();
      view.table_stride = c.max_blocks;
    } else {
      view.max_blocks = c.max_blocks;
    }
    view.heads = heads.as<int>();
    view.bits = FlashQHeads{c.k_bits, c.v_bits};
    view.k_buffer = k_buffer.as<void>();
    view.v_buffer = v_buffer.as<void>();
    view.buffer_page_stride = c.k_buffer.page_stride;
    view.buffer_head_stride = c.k_buffer.head_stride;
    view.compressed_lens = compressed.as<int>();
    view.buffer_lens = buffered.as<int>();
    view.k_scale8 = k_scale.as<float>();
    view.v_scale8 = v_scale.as<float>();
  }
};

// Decodes q over the cache on the GPU (output and LSE poisoned first) and with the reference.
FqResult decode_and_compare(Runtime& rt, const Spec& s, const FqCase& c, const HostFlashQCache& host,
                            const FlashQCacheView& view, const test::HostTensor& q_in) {
  const int batch = host.batch, heads_q = host.heads_kv * s.gqa, d = s.head_dim;
  int max_len = 0;
  for (int b = 0; b < batch; ++b) max_len = std::max(max_len, host.compressed_lens[b] + host.buffer_lens[b]);
  rt::DeviceBuffer q = rt::DeviceBuffer::from(test::encode(q_in, s.out));
  std::vector<std::uint16_t> o_poison(static_cast<size_t>(batch) * heads_q * c.q_len * d);
  test::fill_nan(o_poison, s.out);
  rt::DeviceBuffer o = rt::DeviceBuffer::from(o_poison);
  std::vector<float> lse_poison(static_cast<size_t>(batch) * heads_q * c.q_len);
  test::fill_nan(lse_poison);
  rt::DeviceBuffer lse = rt::DeviceBuffer::from(lse_poison);

  DecodeCall call;
  call.spec = s;
  call.problem = Problem{batch, heads_q, host.heads_kv, c.q_len, max_len};
  call.q = q.as<void>();
  call.o = o.as<void>();
  call.flashq = view;
  call.lse = lse.as<float>();
  call.splits = c.splits;
  call.softmax_scale = static_cast<float>(c.softmax_scale);
  call.unified_max = c.unified_max;
  rt.decode(call, nullptr);

  FqResult r;
  if (s.softmax == SoftmaxMode::unified_max) r.fallback_rows = rt.decode_fallback_rows(nullptr);
  for (std::uint16_t bits : o.to_vector<std::uint16_t>()) r.out.push_back(test::half_bits_to_double(bits, s.out));
  for (float v : lse.to_vector<float>()) r.lse.push_back(v);
  r.ref = test::reference_decode_flashq(q_in.logical(), host, host.compressed_lens, host.buffer_lens, heads_q, c.q_len,
                                        s.causal, static_cast<double>(static_cast<float>(c.softmax_scale)), &r.ref_lse);
  r.metrics = test::compare(r.ref, r.out);
  for (size_t i = 0; i < r.lse.size(); ++i) {
    const double diff = std::fabs(r.lse[i] - r.ref_lse[i]);
    r.lse_max_abs = std::isnan(diff) ? INFINITY : std::max(r.lse_max_abs, diff);
  }
  return r;
}

Spec spec_of(const FqCase& c) {
  return parse_spec(c.spec + (c.paged ? " paged" : "") + (c.gemv ? " flow=gemv" : ""));
}

// Host cache: prefill_lens[b] tokens, then one decode step of q_len tokens (the new tokens, which the
// queries are), with K / V channel outliers.
HostFlashQCache build_cache(const Spec& s, const FqCase& c, std::uint64_t seed) {
  const int batch = static_cast<int>(c.prefill_lens.size()), heads_kv = static_cast<int>(c.k_bits.size());
  const int d = s.head_dim;
  const int n = *std::max_element(c.prefill_lens.begin(), c.prefill_lens.end());
  const int max_blocks = (n + c.q_len) / kv::kFlashQBlock + 2;
  HostFlashQCache host = test::make_flashq_cache(d, batch, c.k_bits, c.v_bits, max_blocks, c.paged, seed);
  const test::Shape shape{batch, heads_kv, std::max(n, 1), d};
  test::HostTensor k = test::random_tensor(shape, test::Layout::bhsd, test::k_like(), seed + 1);
  test::HostTensor v = test::random_tensor(shape, test::Layout::bhsd, test::v_like(), seed + 2);
  test::round_to(k, s.out);
  test::round_to(v, s.out);
  // Universal INT8 scales from the prefill tokens' range (what flashq_prefill does by default).
  host.k_scale8.assign(static_cast<size_t>(heads_kv), 0.f);
  host.v_scale8.assign(static_cast<size_t>(heads_kv), 0.f);
  for (int h = 0; h < heads_kv; ++h) {
    double ka = 0, va = 0;
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < shape.seq; ++t)
        for (int ch = 0; ch < d; ++ch) {
          ka = std::max(ka, std::fabs(k.at(b, h, t, ch)));
          va = std::max(va, std::fabs(v.at(b, h, t, ch)));
        }
    host.k_scale8[static_cast<size_t>(h)] = static_cast<float>(ka / 127);
    host.v_scale8[static_cast<size_t>(h)] = static_cast<float>(va / 127);
  }
  test::flashq_prefill(host, as_floats(k), as_floats(v), shape.seq, c.prefill_lens);
  const test::Shape step{batch, heads_kv, c.q_len, d};
  test::HostTensor k_new = test::random_tensor(step, test::Layout::bhsd, test::k_like(), seed + 3);
  test::HostTensor v_new = test::random_tensor(step, test::Layout::bhsd, test::v_like(), seed + 4);
  test::round_to(k_new, s.out);
  test::round_to(v_new, s.out);
  test::flashq_append(host, as_floats(k_new), as_floats(v_new), c.q_len);
  return host;
}

FqResult run_case(Runtime& rt, const FqCase& c, std::uint64_t seed) {
  const Spec s = spec_of(c);
  const HostFlashQCache host = build_cache(s, c, seed);
  DeviceFlashQ dev(host);
  const int batch = host.batch, heads_q = host.heads_kv * s.gqa;
  test::HostTensor q = test::random_tensor({batch, heads_q, c.q_len, s.head_dim}, test::Layout::bhsd, test::q_like(), seed + 5);
  test::round_to(q, s.out);
  return decode_and_compare(rt, s, c, host, dev.view, q);
}

void expect_accurate(const FqResult& r, const std::string& what) {
  SCOPED_TRACE(what + ": " + r.metrics.report());
  EXPECT_EQ(r.metrics.nonfinite, 0);
  EXPECT_GE(r.metrics.cosine, 0.9999);
  EXPECT_LE(r.metrics.rel_l2, 1e-2);
  EXPECT_LE(r.lse_max_abs, 1e-2);
  std::printf("  %-78s %s lseMaxAbs=%.2e\n", what.c_str(), r.metrics.report().c_str(), r.lse_max_abs);
}

std::string fq_spec(int d, int gqa, bool causal, const char* out = "bf16") {
  return "decode qk=flashq:per_channel pv=flashq:per_channel out=" + std::string(out) + " d=" + std::to_string(d) +
         " gqa=" + std::to_string(gqa) + (causal ? " causal" : "");
}

// Heads with every (K bits, V bits) pair.
const std::vector<int> kKBits = {4, 2, 4, 2}, kVBits = {4, 4, 2, 2};
const std::vector<int> kLens = {1, 63, 64, 65, 4097};

class FlashQDecodeGpu : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

TEST_F(FlashQDecodeGpu, MixedBitsBothFlowsContiguousAndPagedMatchReference) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (bool gemv : {false, true})
    for (bool paged : {false, true})
      for (bool causal : {false, true}) {
        FqCase c{fq_spec(128, causal ? 4 : 5, causal), kKBits, kVBits, causal ? 4 : 1, kLens, paged, gemv};
        expect_accurate(run_case(rt, c, seed), to_string(spec_of(c)));
      }
}

TEST_F(FlashQDecodeGpu, HeadDimsAndSplits) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (int d : {64, 256})
    for (bool gemv : {false, true}) {
      FqCase c{fq_spec(d, gemv ? 1 : 8, true, "fp16"), {2, 4}, {4, 2}, 2, {100, 1000}, d == 64, gemv};
      expect_accurate(run_case(rt, c, seed), to_string(spec_of(c)));
    }
  std::vector<double> first;
  for (int splits : {1, 2, 7, 32}) {
    FqCase c{fq_spec(128, 4, false), kKBits, kVBits, 1, kLens, false, false, splits};
    const FqResult r = run_case(rt, c, seed);
    expect_accurate(r, to_string(spec_of(c)) + " splits=" + std::to_string(splits));
    if (first.empty()) first = r.out;
    else EXPECT_LE(test::compare(first, r.out).rel_l2, 5e-3) << "splits=" << splits;
  }
}

// softmax=sas and unified_max over the blocks and the buffer, on both flows. SAS: as close to the exact
// softmax as for the other caches (decode_gpu_test.cpp), its LSE never above the exact one by more than
// the cubic's error. Unified max: phi calibrated from an exact run's LSE (scores scaled by 0.1 / sqrt(d)
// so that the row maxima fit the fp16 P window, see decode_umax_gpu_test.cpp): no row falls back and
// the result matches the reference as the exact mode does.
TEST_F(FlashQDecodeGpu, SasAndUnifiedMaxOnBothFlows) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (bool gemv : {false, true}) {
    FqCase sas{fq_spec(128, 4, true) + " softmax=sas", kKBits, kVBits, 2, kLens, !gemv, gemv};
    const FqResult r = run_case(rt, sas, seed);
    SCOPED_TRACE(to_string(spec_of(sas)) + ": " + r.metrics.report());
    EXPECT_EQ(r.metrics.nonfinite, 0);
    EXPECT_GE(r.metrics.cosine, 0.9999);
    EXPECT_LE(r.metrics.rel_l2, 1e-2);
    double most_above = -1;
    for (size_t i = 0; i < r.lse.size(); ++i) most_above = std::max(most_above, r.lse[i] - r.ref_lse[i]);
    EXPECT_LE(most_above, 5e-3) << "SAS added mass";

    FqCase exact{fq_spec(128, 4, true), kKBits, kVBits, 2, kLens, gemv, gemv};
    exact.softmax_scale = 0.1 / std::sqrt(128.0);
    const FqResult e = run_case(rt, exact, seed);
    // Each row's maximum lies in [lse - ln(keys), lse]; keys: its sequence's length (an upper bound).
    std::vector<int> row_keys;
    for (int len : kLens)
      for (int r = 0; r < static_cast<int>(kKBits.size()) * 4 * 2; ++r) row_keys.push_back(len + 2);
    UnifiedMaxCalibrationOptions co;
    co.sample = ScoreSample::row_lse;
    co.row_keys = row_keys.data();
    ASSERT_EQ(row_keys.size(), e.lse.size());
    const UnifiedMaxCalibration cal = calibrate_unified_max(e.lse, co);
    ASSERT_TRUE(cal.enabled) << cal.reason;
    FqCase um = exact;
    um.spec += " softmax=unified_max";
    um.unified_max = cal.params;
    const FqResult u = run_case(rt, um, seed);
    expect_accurate(u, to_string(spec_of(um)));
    EXPECT_EQ(u.fallback_rows, 0);
    EXPECT_LE(test::compare(e.out, u.out).rel_l2, 5e-3) << "unified max vs exact";
  }
}

// The device path end to end: flashq_prefill (choosing bits and scales), decode steps with appends
// across two flushes, against the host model fed the same tokens and the bits / scales the device chose.
TEST_F(FlashQDecodeGpu, PrefillAppendsAndDecodeOnTheDevice) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (bool paged : {false, true}) {
    const Spec s = parse_spec(fq_spec(128, 4, true) + (paged ? " paged" : ""));
    const int batch = 3, heads_kv = 4, d = 128, q_len = 2, steps = 70;
    const std::vector<int> lens = {5, 64, 200};
    const int n = 200, max_blocks = (n + steps * q_len) / kv::kFlashQBlock + 2;
    HostFlashQCache host = test::make_flashq_cache(d, batch, {4, 4, 4, 4}, {4, 4, 4, 4}, max_blocks, paged, seed);
    DeviceFlashQ dev(host);   // poisoned bytes, lengths 0
    test::HostTensor k = test::random_tensor({batch, heads_kv, n, d}, test::Layout::bhsd, test::k_like(), seed + 1);
    test::HostTensor v = test::random_tensor({batch, heads_kv, n, d}, test::Layout::bhsd, test::v_like(), seed + 2);
    test::round_to(k, s.out);
    test::round_to(v, s.out);
    rt::DeviceBuffer k_dev = rt::DeviceBuffer::from(test::encode(k, s.out)), v_dev = rt::DeviceBuffer::from(test::encode(v, s.out));
    FlashQPrefillCall pre;
    pre.spec = s;
    pre.batch = batch;
    pre.heads_kv = heads_kv;
    pre.n = n;
    pre.k = k_dev.as<void>();
    pre.v = v_dev.as<void>();
    pre.lens = lens;
    pre.cache = dev.view;
    pre.cache.bits = FlashQHeads{};   // let the runtime choose
    const FlashQPrefillInfo info = rt.flashq_prefill(pre, nullptr);
    dev.view.bits = info.bits;
    dev.view.k_page_stride = info.k_page_stride;
    dev.view.v_page_stride = info.v_page_stride;
    // The host model with the device's choices.
    host = test::make_flashq_cache(d, batch, info.bits.k_bits, info.bits.v_bits, max_blocks, paged, seed,
                                   info.k_page_stride, info.v_page_stride);
    host.k_scale8 = info.k_scale8;
    host.v_scale8 = info.v_scale8;
    test::flashq_prefill(host, as_floats(k), as_floats(v), n, lens);
    for (int step = 0; step < steps; ++step) {
      test::HostTensor kn = test::random_tensor({batch, heads_kv, q_len, d}, test::Layout::bhsd, test::k_like(), seed + 10 + step);
      test::HostTensor vn = test::random_tensor({batch, heads_kv, q_len, d}, test::Layout::bhsd, test::v_like(), seed + 500 + step);
      test::round_to(kn, s.out);
      test::round_to(vn, s.out);
      rt::DeviceBuffer kd = rt::DeviceBuffer::from(test::encode(kn, s.out)), vd = rt::DeviceBuffer::from(test::encode(vn, s.out));
      FlashQAppendCall app;
      app.spec = s;
      app.batch = batch;
      app.heads_kv = heads_kv;
      app.n_new = q_len;
      app.k = kd.as<void>();
      app.v = vd.as<void>();
      app.cache = dev.view;
      rt.flashq_append(app, nullptr);
      test::flashq_append(host, as_floats(kn), as_floats(vn), q_len);
      if (step % 23 != 22 && step != steps - 1) continue;
      test::HostTensor q = test::random_tensor({batch, heads_kv * 4, q_len, d}, test::Layout::bhsd, test::q_like(), seed + 900 + step);
      test::round_to(q, s.out);
      FqCase c{fq_spec(128, 4, true), info.bits.k_bits, info.bits.v_bits, q_len, lens, paged};
      expect_accurate(decode_and_compare(rt, s, c, host, dev.view, q),
                      to_string(s) + " after step " + std::to_string(step + 1));
    }
    EXPECT_GT(host.compressed_lens[0], 64) << "the steps were meant to flush the buffer";
  }
}

}  // namespace
}  // namespace qattn
