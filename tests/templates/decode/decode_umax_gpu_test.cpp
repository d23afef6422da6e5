// softmax=unified_max (FlashDecoding++) decode on the GPU: the unified-max kernel, the exact kernel of
// the same tiling on the rows it flags (fallback_only), and the combine, against the float64 reference
// on the dequantized cache and against the exact kernel's own bits.
//
// Caches int4:per_token, int8:per_token and bf16, contiguous and paged (pages of 16), without and with
// the causal mask (1 new token at GQA 4; 4 new tokens at GQA 5: 20 rows in a block of 32, so padded
// rows are in play), ragged lengths 1, 15, 16, 17, 4097, filled through append_kv. With 4 causal new
// tokens the sequence of length 1 leaves rows that see no key: no score is above phi + lo, so they
// always take the exact path (zeros, LSE -inf), like the exact kernel.
//   (a) phi calibrated from an exact run's LSE output: no row falls back, the output matches the
//       float64 reference (cosine >= 0.9999, rel L2 <= 1e-2, LSE within 1e-2) and the exact kernel
//       (rel L2 <= 5e-3);
//   (b) phi far too low (every row overflows) or far too high (every row underflows): every row falls
//       back and output and LSE equal the exact kernel's bit for bit (same tiling, same splits); a
//       disabled unified max runs the exact kernel alone (the same bits);
//   (c) one sequence with a planted outlier key: only rows of its KV head group are flagged, those rows
//       equal the exact kernel's, every other row is bit-identical to the run without the outlier;
//   (d) split counts 1, 2, 7, 32 agree (rel L2 <= 5e-3) and none falls back.
// The data: Q without outlier channels and, for the fp16-P caches (int4, int8), softmax_scale
// 0.3/sqrt(d), so that the row maxima implied by the LSEs span ~13 nats, which the fp16 window (-9, 8)
// holds (a real model's row maxima would be calibrated directly; FlashDecoding++ Fig. 5 gives their
// spread); the K channel bias still shifts whole rows. bf16 (window (-40, 40)) keeps 1/sqrt(d).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/unified_max.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostKvCache;

// An outlier key written over K token t of sequence b, KV head h, before the append.
struct Plant {
  int b = -1, h = 0, t = 0;
  std::vector<double> k;
};

// One ragged batch in a KV cache (filled by the library's append kernel) and its queries.
struct Setup {
  Spec spec;   // softmax unset (exact)
  int heads_kv = 2, heads_q = 0, q_len = 1, batch = 0, max_len = 0;
  int page_size = 0;
  std::vector<int> lens;
  float softmax_scale = 0;
  test::HostTensor q_in;
  HostKvCache k_host, v_host;
  rt::DeviceBuffer k_cache, v_cache, table, q, lens_dev;
  KvCacheView view;

  long long rows() const { return static_cast<long long>(batch) * heads_q * q_len; }
  long long row(int b, int hq, int i) const { return (static_cast<long long>(b) * heads_q + hq) * q_len + i; }
  int gqa() const { return heads_q / heads_kv; }
  // Keys row (b, hq, i) sees (causal: none for the first new tokens of a sequence shorter than q_len).
  int visible(long long r) const {
    const int b = static_cast<int>(r / (static_cast<long long>(heads_q) * q_len)), i = static_cast<int>(r % q_len);
    const int len = lens[static_cast<size_t>(b)];
    return std::max(0, spec.causal ? len - q_len + 1 + i : len);
  }
  // Rows that see no key: no score is > phi + lo, so they take the exact path (zeros, LSE -inf).
  long long empty_rows() const {
    long long n = 0;
    for (long long r = 0; r < rows(); ++r) n += visible(r) == 0;
    return n;
  }
};

bool fp16_p(const std::string& fmt) { return fmt.rfind("bf16", 0) != 0; }

std::unique_ptr<Setup> make_setup(Runtime& rt, const std::string& fmt, bool causal, int page_size, std::uint64_t seed,
                                  const std::vector<int>& lens, const Plant* plant = nullptr) {
  auto s = std::make_unique<Setup>();
  const int gqa = causal ? 5 : 4;
  s->q_len = causal ? 4 : 1;
  s->spec = parse_spec("decode qk=" + fmt + " d=128 gqa=" + std::to_string(gqa) + (causal ? " causal" : "") +
                       (page_size ? " paged" : ""));
  const int d = s->spec.head_dim;
  s->heads_q = s->heads_kv * gqa;
  s->lens = lens;
  s->batch = static_cast<int>(lens.size());
  s->max_len = *std::max_element(lens.begin(), lens.end());
  s->page_size = page_size;
  s->softmax_scale = static_cast<float>((fp16_p(fmt) ? 0.3 : 1.0) / std::sqrt(double(d)));
  const int capacity = (s->max_len + 3) / 4 * 4;
  const Fmt io = s->spec.out;

  const test::Shape kv_shape{s->batch, s->heads_kv, s->max_len, d};
  test::HostTensor k_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::k_like(), seed);
  test::HostTensor v_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::v_like(), seed + 1);
  s->q_in = test::random_tensor({s->batch, s->heads_q, s->q_len, d}, test::Layout::bhsd, test::plain(), seed + 2);
  if (plant)
    for (int c = 0; c < d; ++c) k_in.at(plant->b, plant->h, plant->t, c) = plant->k[static_cast<size_t>(c)];
  for (test::HostTensor* t : {&k_in, &v_in, &s->q_in}) test::round_to(*t, io);

  const Spec& sp = s->spec;
  auto cache = [&] {
    if (!page_size) return test::make_contiguous(sp.qk.fmt, sp.qk.gran, d, s->batch, s->heads_kv, capacity);
    return test::make_paged(sp.qk.fmt, sp.qk.gran, d, s->batch, s->heads_kv, page_size,
                            (capacity + page_size - 1) / page_size, seed + 3);
  };
  s->k_host = cache();
  s->v_host = cache();
  s->k_cache = rt::DeviceBuffer::from(s->k_host.bytes);
  s->v_cache = rt::DeviceBuffer::from(s->v_host.bytes);
  s->table = rt::DeviceBuffer::from(page_size ? s->k_host.block_table : std::vector<int>{0});
  s->view.k = s->k_cache.as<void>();
  s->view.v = s->v_cache.as<void>();
  s->view.head_stride = s->k_host.head_stride;
  s->view.page_stride = s->k_host.page_stride;
  if (page_size) {
    s->view.page_size = page_size;
    s->view.block_table = s->table.as<int>();
    s->view.table_stride = s->k_host.table_stride;
  } else {
    s->view.capacity = capacity;
  }

  rt::DeviceBuffer k_new = rt::DeviceBuffer::from(test::encode(k_in, io));
  rt::DeviceBuffer v_new = rt::DeviceBuffer::from(test::encode(v_in, io));
  rt::DeviceBuffer start = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(s->batch), 0));
  AppendKvCall append;
  append.spec = sp;
  append.batch = s->batch;
  append.heads_kv = s->heads_kv;
  append.n_new = s->max_len;
  append.k = k_new.as<void>();
  append.v = v_new.as<void>();
  append.cache = s->view;
  append.start = start.as<int>();
  rt.append_kv(append, nullptr);

  // The host caches take the device's bytes (decode_gpu_test checks them against the host quantizer);
  // rows past each length are poisoned on both sides.
  for (int which = 0; which < 2; ++which) {
    HostKvCache& host = which == 0 ? s->k_host : s->v_host;
    rt::DeviceBuffer& dev = which == 0 ? s->k_cache : s->v_cache;
    host.bytes = dev.to_vector<unsigned char>();
    for (int b = 0; b < s->batch; ++b)
      for (int h = 0; h < s->heads_kv; ++h)
        for (int t = lens[static_cast<size_t>(b)]; t < capacity; ++t)
          std::memset(host.bytes.data() + test::row_offset(host, b, h, t), test::kKvPoison,
                      static_cast<size_t>(host.row_bytes()));
    dev.upload(host.bytes.data(), host.bytes.size());
  }
  s->q = rt::DeviceBuffer::from(test::encode(s->q_in, io));
  s->lens_dev = rt::DeviceBuffer::from(lens);
  return s;
}

struct DecodeRun {
  std::vector<std::uint16_t> bits;
  std::vector<double> out;
  std::vector<float> lse;
  std::vector<int> flags;     // unified max with caller flags only
  long long fallback_rows = -1;
  int splits = 0;             // the split count decode() used
};

constexpr int kFlagPoison = 0x7f7f7f7f;

// One decode of the setup; softmax exact, or unified max with `um` (flags into a caller buffer
// poisoned first, or into the runtime's workspace).
DecodeRun run(Runtime& rt, const Setup& s, bool unified, const UnifiedMax& um, int splits, bool caller_flags = true) {
  const Fmt io = s.spec.out;
  const int d = s.spec.head_dim;
  std::vector<std::uint16_t> o_poison(static_cast<size_t>(s.rows()) * d);
  test::fill_nan(o_poison, io);
  rt::DeviceBuffer o = rt::DeviceBuffer::from(o_poison);
  std::vector<float> lse_poison(static_cast<size_t>(s.rows()));
  test::fill_nan(lse_poison);
  rt::DeviceBuffer lse = rt::DeviceBuffer::from(lse_poison);
  rt::DeviceBuffer flags = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(s.rows()), kFlagPoison));

  DecodeCall call;
  call.spec = s.spec;
  if (unified) call.spec.softmax = SoftmaxMode::unified_max;
  call.problem = Problem{s.batch, s.heads_q, s.heads_kv, s.q_len, s.max_len};
  call.q = s.q.as<void>();
  call.o = o.as<void>();
  call.cache = s.view;
  call.kv_lens = s.lens_dev.as<int>();
  call.lse = lse.as<float>();
  call.softmax_scale = s.softmax_scale;
  call.splits = splits;
  call.unified_max = um;
  if (unified && caller_flags) call.row_flags = flags.as<int>();
  rt.decode(call, nullptr);

  DecodeRun r;
  r.splits = rt.decode_splits(call);
  r.bits = o.to_vector<std::uint16_t>();
  for (std::uint16_t b : r.bits) r.out.push_back(test::half_bits_to_double(b, io));
  r.lse = lse.to_vector<float>();
  if (unified) {
    r.fallback_rows = rt.decode_fallback_rows(nullptr);
    if (caller_flags) r.flags = flags.to_vector<int>();
  }
  return r;
}

struct Reference {
  std::vector<double> out, lse;
};

Reference reference(const Setup& s) {
  Reference r;
  r.out = test::reference_decode(s.q_in.logical(), s.k_host, s.v_host, s.lens, s.heads_q, s.q_len, s.spec.causal,
                                 static_cast<double>(s.softmax_scale), &r.lse);
  return r;
}

double lse_max_abs(const std::vector<float>& got, const std::vector<double>& want) {
  double most = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double diff = std::isinf(want[i]) && g == want[i] ? 0.0 : std::fabs(g - want[i]);
    most = std::isnan(diff) ? INFINITY : std::max(most, diff);
  }
  return most;
}

// phi from the LSE output of an exact run, each row bounded by its own visible keys.
UnifiedMaxCalibration calibrate(const Setup& s, const DecodeRun& exact) {
  std::vector<int> keys(static_cast<size_t>(s.rows()));
  for (long long r = 0; r < s.rows(); ++r) keys[static_cast<size_t>(r)] = s.visible(r);
  UnifiedMaxCalibrationOptions o;
  o.sample = ScoreSample::row_lse;
  o.row_keys = keys.data();
  o.window = unified_max_window(unified_max_p_type(s.spec));
  return calibrate_unified_max(exact.lse, o);
}

void expect_accurate(const DecodeRun& r, const Reference& ref, const std::string& what) {
  const test::ErrorMetrics m = test::compare(ref.out, r.out);
  SCOPED_TRACE(what + ": " + m.report());
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_GE(m.cosine, 0.9999);
  EXPECT_LE(m.rel_l2, 1e-2);
  const double lse_err = lse_max_abs(r.lse, ref.lse);
  EXPECT_LE(lse_err, 1e-2);
  std::printf("  %-78s %s lseMaxAbs=%.2e fallback=%lld splits=%d\n", what.c_str(), m.report().c_str(), lse_err,
              r.fallback_rows, r.splits);
}

const char* kFormats[] = {"int4:per_token pv=int4:per_token out=bf16", "int8:per_token pv=int8:per_token out=fp16",
                          "bf16 pv=bf16 out=bf16"};
const std::vector<int> kRaggedLens = {1, 15, 16, 17, 4097};

std::string label(const Setup& s) { return to_string(s.spec); }

class DecodeUmaxGpu : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

TEST_F(DecodeUmaxGpu, CalibratedPhiNeedsNoFallbackAndMatchesReferenceAndExact) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : kFormats)
    for (int page : {0, 16})
      for (bool causal : {false, true}) {
        const auto s = make_setup(rt, fmt, causal, page, seed, kRaggedLens);
        const DecodeRun exact = run(rt, *s, false, {}, 0);
        const UnifiedMaxCalibration c = calibrate(*s, exact);
        SCOPED_TRACE(label(*s) + ": maxima in [" + std::to_string(c.max_lo) + ", " + std::to_string(c.max_hi) +
                     "], phi " + std::to_string(c.params.phi) + ", headroom " + std::to_string(c.headroom));
        ASSERT_TRUE(c.enabled) << c.reason;
        const DecodeRun um = run(rt, *s, true, c.params, 0);
        EXPECT_EQ(um.fallback_rows, s->empty_rows()) << "only the rows that see no key";
        for (long long r = 0; r < s->rows(); ++r)
          EXPECT_EQ(um.flags[static_cast<size_t>(r)], s->visible(r) ? kUmSeen : 0) << "row " << r;
        expect_accurate(um, reference(*s), label(*s) + " unified_max");
        EXPECT_LE(test::compare(exact.out, um.out).rel_l2, 5e-3) << "unified max vs the exact kernel";
        EXPECT_LE(lse_max_abs(um.lse, std::vector<double>(exact.lse.begin(), exact.lse.end())), 1e-2);
      }
}

TEST_F(DecodeUmaxGpu, PhiFarOffRecomputesEveryRowBitForBit) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : kFormats)
    for (int page : {0, 16})
      for (bool causal : {false, true}) {
        const auto s = make_setup(rt, fmt, causal, page, seed, kRaggedLens);
        const UnifiedMax base = calibrate(*s, run(rt, *s, false, {}, 0)).params;
        for (int splits : {1, 7}) {
          const DecodeRun exact = run(rt, *s, false, {}, splits);
          SCOPED_TRACE(label(*s) + " splits=" + std::to_string(exact.splits));
          UnifiedMax low = base, high = base, off = base;
          low.phi -= 100;    // every score 100 above phi: every row overflows
          high.phi += 100;   // every row's maximum 100 below phi: every row underflows
          off.enabled = false;
          for (const auto& [um, want_flags, name] :
               {std::make_tuple(low, kUmOverflow | kUmSeen, "phi - 100"), std::make_tuple(high, 0, "phi + 100"),
                std::make_tuple(off, 0, "disabled")}) {
            SCOPED_TRACE(name);
            const DecodeRun r = run(rt, *s, true, um, splits);
            EXPECT_EQ(r.splits, exact.splits);
            EXPECT_EQ(r.fallback_rows, s->rows());
            for (long long row = 0; row < s->rows(); ++row)   // a row that sees no key sets no flag
              EXPECT_EQ(r.flags[static_cast<size_t>(row)], s->visible(row) ? want_flags : 0) << "row " << row;
            EXPECT_EQ(r.bits, exact.bits) << "output differs from the exact kernel's";
            EXPECT_EQ(std::memcmp(r.lse.data(), exact.lse.data(), r.lse.size() * sizeof(float)), 0)
                << "LSE differs from the exact kernel's";
          }
          // The runtime's own flags workspace counts the same.
          EXPECT_EQ(run(rt, *s, true, low, splits, false).fallback_rows, s->rows());
        }
      }
}

TEST_F(DecodeUmaxGpu, MixedBatchRecomputesOnlyTheOutlierRows) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : kFormats)
    for (const auto& [page, causal, splits] : {std::make_tuple(0, false, 1), std::make_tuple(16, true, 7)}) {
      const auto base = make_setup(rt, fmt, causal, page, seed, kRaggedLens);
      const UnifiedMaxCalibration c = calibrate(*base, run(rt, *base, false, {}, 0));
      SCOPED_TRACE(label(*base) + " splits=" + std::to_string(splits));
      ASSERT_TRUE(c.enabled) << c.reason;
      const UnifiedMax um = c.params;
      const DecodeRun clean = run(rt, *base, true, um, splits);
      ASSERT_EQ(clean.fallback_rows, base->empty_rows());

      // Token 0 (seen by every row; the sequence holds 17) of sequence 3, KV head 1: a key along the sum
      // of the group's queries,
      // long enough that the group's best-aligned row scores phi + hi + 3.
      Plant plant;
      plant.b = 3;
      plant.h = 1;
      const int d = base->spec.head_dim, gqa = base->gqa();
      std::vector<double> u(static_cast<size_t>(d), 0.0);
      for (int hq = plant.h * gqa; hq < (plant.h + 1) * gqa; ++hq)
        for (int i = 0; i < base->q_len; ++i)
          for (int ch = 0; ch < d; ++ch) u[static_cast<size_t>(ch)] += base->q_in.at(plant.b, hq, i, ch);
      double norm = 0;
      for (double x : u) norm += x * x;
      for (double& x : u) x /= std::sqrt(norm);
      double best = 0;
      for (int hq = plant.h * gqa; hq < (plant.h + 1) * gqa; ++hq)
        for (int i = 0; i < base->q_len; ++i) {
          double dot = 0;
          for (int ch = 0; ch < d; ++ch) dot += base->q_in.at(plant.b, hq, i, ch) * u[static_cast<size_t>(ch)];
          best = std::max(best, dot);
        }
      ASSERT_GT(best, 0);
      const double alpha = (um.phi + um.hi + 3) / (base->softmax_scale * best);
      for (double x : u) plant.k.push_back(alpha * x);
      const auto planted = make_setup(rt, fmt, causal, page, seed, kRaggedLens, &plant);

      const DecodeRun exact = run(rt, *planted, false, {}, splits);
      const DecodeRun mixed = run(rt, *planted, true, um, splits);
      expect_accurate(mixed, reference(*planted), label(*planted) + " with an outlier key");

      // The outlier's score per row, in float64 on the dequantized cache.
      std::vector<double> key(static_cast<size_t>(d));
      test::read_token(planted->k_host, plant.b, plant.h, plant.t, key.data());
      long long in_group = 0, flagged = 0;
      for (int b = 0; b < planted->batch; ++b)
        for (int hq = 0; hq < planted->heads_q; ++hq)
          for (int i = 0; i < planted->q_len; ++i) {
            const long long r = planted->row(b, hq, i);
            const size_t ri = static_cast<size_t>(r);
            const bool group = b == plant.b && hq / gqa == plant.h;
            const bool falls = mixed.flags[ri] != kUmSeen;
            auto row_bits = [&](const DecodeRun& x) {
              return std::vector<std::uint16_t>(x.bits.begin() + r * d, x.bits.begin() + (r + 1) * d);
            };
            if (!group) {
              EXPECT_EQ(mixed.flags[ri], clean.flags[ri]) << "row " << r << " outside the outlier's group";
              EXPECT_EQ(row_bits(mixed), row_bits(clean)) << "row " << r << " changed without the outlier in it";
              continue;
            }
            ++in_group;
            flagged += falls;
            double x = 0;
            for (int ch = 0; ch < d; ++ch) x += planted->q_in.at(b, hq, i, ch) * key[static_cast<size_t>(ch)];
            x *= planted->softmax_scale;
            if (x - um.phi >= um.hi + 0.5) {
              EXPECT_TRUE(mixed.flags[ri] & kUmOverflow) << "row " << r << ": x - phi " << x - um.phi;
            }
            if (falls) {
              EXPECT_EQ(row_bits(mixed), row_bits(exact)) << "recomputed row " << r << " is not the exact kernel's";
            }
          }
      EXPECT_GE(flagged, 1);
      EXPECT_LE(flagged, in_group);
      EXPECT_EQ(mixed.fallback_rows, base->empty_rows() + flagged);
      std::printf("  %-78s %lld of %lld rows recomputed (%lld in the outlier's group)\n", label(*planted).c_str(),
                  flagged, planted->rows(), in_group);
    }
}

TEST_F(DecodeUmaxGpu, SplitCountsAgree) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[0], kFormats[2]}) {
    const auto s = make_setup(rt, fmt, false, 0, seed, kRaggedLens);
    const UnifiedMaxCalibration c = calibrate(*s, run(rt, *s, false, {}, 0));
    ASSERT_TRUE(c.enabled) << c.reason;
    const Reference ref = reference(*s);
    std::vector<double> first;
    for (int splits : {1, 2, 7, 32}) {
      const DecodeRun r = run(rt, *s, true, c.params, splits);
      EXPECT_EQ(r.fallback_rows, 0);   // not causal: every row sees keys
      expect_accurate(r, ref, label(*s) + " splits=" + std::to_string(splits));
      if (first.empty()) first = r.out;
      else EXPECT_LE(test::compare(first, r.out).rel_l2, 5e-3) << "splits=" << splits << " vs splits=1";
    }
  }
}

}  // namespace
}  // namespace qattn
