// Decode over a KV cache on the GPU: every cache format (fp16, bf16, int8:per_token, int4:per_token,
// int4:per_group, fp8e4m3:per_head), contiguous and paged, against the float64 reference on the dequantized cache.
//
// Each run fills the cache with the library's append kernel (whose bytes must equal the host quantizer's
// from kv_layout.h, byte for byte), re-poisons every row past a sequence's length (NaN bit patterns:
// a kernel that reads them fails), poisons the output and LSE, decodes, and compares. Lengths 1, 15,
// 16, 17 and 4097 in one ragged batch; GQA 1 .. 16 (rows per KV head up to 48: several row blocks);
// new tokens 1 .. 16 with and without the causal mask; d 64, 128, 256; split counts 1, 2, 7, 32, 128.
// Thresholds (the reference sees the same dequantized values, so only fp16 rounding of P and of the
// dequantized K/V separates them): cosine >= 0.9999, relative L2 <= 1e-2, LSE within 1e-2 (plus, for
// int4 per_group, the bound of its fp16-rounded K; see lse_tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostKvCache;

struct DecodeCase {
  std::string spec;      // without the paged token (added by page_size > 0)
  int heads_kv = 2;
  int q_len = 1;
  std::vector<int> kv_lens;
  int page_size = 0;     // 0: contiguous
  int splits = 0;        // 0: the runtime's choice
  Tiling tiling = Tiling{0, 0, 0, 0};   // block_m 0: the runtime's choice
};

struct DecodeResult {
  std::vector<double> out, lse, ref, ref_lse;
  test::ErrorMetrics metrics;
  double lse_max_abs = 0;
  double lse_excess = 0;   // max over rows of |lse - ref| / the row's tolerance (<= 1 passes)
  long long append_byte_mismatches = 0;
  std::vector<std::uint16_t> out_bits;
};

Spec spec_of(const DecodeCase& c) { return parse_spec(c.spec + (c.page_size ? " paged" : "")); }

HostKvCache make_cache(const Spec& s, const DecodeCase& c, int capacity, std::uint64_t seed) {
  const int batch = static_cast<int>(c.kv_lens.size());
  if (c.page_size == 0) return test::make_contiguous(s.qk.fmt, s.qk.gran, s.head_dim, batch, c.heads_kv, capacity);
  return test::make_paged(s.qk.fmt, s.qk.gran, s.head_dim, batch, c.heads_kv, c.page_size,
                          (capacity + c.page_size - 1) / c.page_size, seed);
}

// Rows at or past each sequence's length get the poison bytes (what a kernel must never read).
void poison_tail(HostKvCache& cache, const std::vector<int>& kv_lens, int capacity) {
  const int row = cache.row_bytes();
  for (int b = 0; b < cache.batch; ++b)
    for (int h = 0; h < cache.heads_kv; ++h)
      for (int t = kv_lens[static_cast<size_t>(b)]; t < capacity; ++t)
        std::memset(cache.bytes.data() + test::row_offset(cache, b, h, t), test::kKvPoison, static_cast<size_t>(row));
}

// Per-row LSE tolerance: 1e-2, plus for int4 per_group the fp16 rounding of its dequantized K (scale·q +
// shift enters the tensor cores rounded to fp16, 2^-11 relative; every other format's K enters exactly:
// fp16/bf16 as stored, int8 and int4 per-token codes as integers with the scales applied in fp32). That
// moves each score by at most 2^-11 · softmax_scale · Σ_c |q_c k_c|, and the LSE, a smooth maximum of the
// scores, by at most the largest such bound over the row's tokens.
std::vector<double> lse_tolerance(const Spec& s, const test::HostTensor& q, const HostKvCache& k,
                                  const std::vector<int>& kv_lens, int heads_q, int q_len) {
  const int d = s.head_dim, gqa = heads_q / k.heads_kv;
  std::vector<double> tol(static_cast<size_t>(k.batch) * heads_q * q_len, 1e-2);
  if (!(s.qk.fmt == Fmt::int4 && s.qk.gran == Gran::per_group)) return tol;
  std::vector<double> row(static_cast<size_t>(d));
  for (int b = 0; b < k.batch; ++b)
    for (int hq = 0; hq < heads_q; ++hq)
      for (int i = 0; i < q_len; ++i) {
        double most = 0;
        for (int t = 0; t < kv_lens[static_cast<size_t>(b)]; ++t) {
          test::read_token(k, b, hq / gqa, t, row.data());
          double sum = 0;
          for (int c = 0; c < d; ++c) sum += std::fabs(q.at(b, hq, i, c) * row[static_cast<size_t>(c)]);
          most = std::max(most, sum);
        }
        tol[(static_cast<size_t>(b) * heads_q + hq) * q_len + i] += std::ldexp(most / std::sqrt(double(d)), -11);
      }
  return tol;
}

DecodeResult run_case(Runtime& rt, const DecodeCase& c, std::uint64_t seed) {
  const Spec s = spec_of(c);
  const int d = s.head_dim, batch = static_cast<int>(c.kv_lens.size());
  const int heads_q = c.heads_kv * s.gqa;
  const int max_len = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
  const int capacity = (max_len + 3) / 4 * 4;
  const Fmt io = s.out;

  // New K/V tokens (with the channel outliers of real K / V) and the queries, as fp16/bf16.
  const test::Shape kv_shape{batch, c.heads_kv, max_len, d};
  test::HostTensor k_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::k_like(), seed);
  test::HostTensor v_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::v_like(), seed + 1);
  test::HostTensor q_in = test::random_tensor({batch, heads_q, c.q_len, d}, test::Layout::bhsd, test::q_like(), seed + 2);
  for (test::HostTensor* t : {&k_in, &v_in, &q_in}) test::round_to(*t, io);

  HostKvCache k_host = make_cache(s, c, capacity, seed + 3), v_host = make_cache(s, c, capacity, seed + 3);
  // fp8: per-head scales max|x| / 448 over every token of the head (the host model and the device share them).
  for (int which = 0; which < 2 && s.qk.fmt == Fmt::fp8e4m3; ++which) {
    const test::HostTensor& in = which == 0 ? k_in : v_in;
    HostKvCache& host = which == 0 ? k_host : v_host;
    for (int h = 0; h < c.heads_kv; ++h) {
      double amax = 0;
      for (int b = 0; b < batch; ++b)
        for (int t = 0; t < max_len; ++t)
          for (int ch = 0; ch < d; ++ch) amax = std::max(amax, std::fabs(in.at(b, h, t, ch)));
      host.head_scale[static_cast<size_t>(h)] = static_cast<float>(amax) / kv::kFp8Max;
    }
  }
  rt::DeviceBuffer k_scale = rt::DeviceBuffer::from(k_host.head_scale), v_scale = rt::DeviceBuffer::from(v_host.head_scale);
  rt::DeviceBuffer k_cache = rt::DeviceBuffer::from(k_host.bytes), v_cache = rt::DeviceBuffer::from(v_host.bytes);
  rt::DeviceBuffer table = rt::DeviceBuffer::from(c.page_size ? k_host.block_table : std::vector<int>{0});
  KvCacheView view;
  view.k = k_cache.as<void>();
  view.v = v_cache.as<void>();
  view.head_stride = k_host.head_stride;
  view.page_stride = k_host.page_stride;
  if (s.qk.fmt == Fmt::fp8e4m3) {
    view.k_head_scale = k_scale.as<float>();
    view.v_head_scale = v_scale.as<float>();
  }
  if (c.page_size) {
    view.page_size = c.page_size;
    view.block_table = table.as<int>();
    view.table_stride = k_host.table_stride;
  } else {
    view.capacity = capacity;
  }

  rt::DeviceBuffer k_new = rt::DeviceBuffer::from(test::encode(k_in, io));
  rt::DeviceBuffer v_new = rt::DeviceBuffer::from(test::encode(v_in, io));
  rt::DeviceBuffer start = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), 0));
  AppendKvCall append;
  append.spec = s;
  append.batch = batch;
  append.heads_kv = c.heads_kv;
  append.n_new = max_len;
  append.k = k_new.as<void>();
  append.v = v_new.as<void>();
  append.cache = view;
  append.start = start.as<int>();
  rt.append_kv(append, nullptr);

  // The appended bytes against the host quantizer, then the tails poisoned again.
  DecodeResult r;
  for (int which = 0; which < 2; ++which) {
    HostKvCache& host = which == 0 ? k_host : v_host;
    const test::HostTensor& in = which == 0 ? k_in : v_in;
    const std::vector<unsigned char> got = (which == 0 ? k_cache : v_cache).to_vector<unsigned char>();
    std::vector<float> x(static_cast<size_t>(d));
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < c.heads_kv; ++h)
        for (int t = 0; t < max_len; ++t) {
          for (int ch = 0; ch < d; ++ch) x[static_cast<size_t>(ch)] = static_cast<float>(in.at(b, h, t, ch));
          test::write_token(host, b, h, t, x.data());
          const long long off = test::row_offset(host, b, h, t);
          if (std::memcmp(got.data() + off, host.bytes.data() + off, static_cast<size_t>(host.row_bytes())) != 0)
            ++r.append_byte_mismatches;
        }
    host.bytes = got;
    poison_tail(host, c.kv_lens, capacity);
    (which == 0 ? k_cache : v_cache).upload(host.bytes.data(), host.bytes.size());
  }

  rt::DeviceBuffer q = rt::DeviceBuffer::from(test::encode(q_in, io));
  std::vector<std::uint16_t> o_poison(static_cast<size_t>(batch) * heads_q * c.q_len * d);
  test::fill_nan(o_poison, io);
  rt::DeviceBuffer o = rt::DeviceBuffer::from(o_poison);
  std::vector<float> lse_poison(static_cast<size_t>(batch) * heads_q * c.q_len);
  test::fill_nan(lse_poison);
  rt::DeviceBuffer lse = rt::DeviceBuffer::from(lse_poison);
  rt::DeviceBuffer lens = rt::DeviceBuffer::from(c.kv_lens);

  DecodeCall call;
  call.spec = s;
  call.problem = Problem{batch, heads_q, c.heads_kv, c.q_len, max_len};
  call.q = q.as<void>();
  call.o = o.as<void>();
  call.cache = view;
  call.kv_lens = lens.as<int>();
  call.lse = lse.as<float>();
  call.splits = c.splits;
  call.tiling = c.tiling;
  rt.decode(call, nullptr);

  r.out_bits = o.to_vector<std::uint16_t>();
  for (std::uint16_t bits : r.out_bits) r.out.push_back(test::half_bits_to_double(bits, io));
  for (float v : lse.to_vector<float>()) r.lse.push_back(v);
  r.ref = test::reference_decode(q_in.logical(), k_host, v_host, c.kv_lens, heads_q, c.q_len, s.causal, 0.0, &r.ref_lse);
  r.metrics = test::compare(r.ref, r.out);
  const std::vector<double> tol = lse_tolerance(s, q_in, k_host, c.kv_lens, heads_q, c.q_len);
  for (size_t i = 0; i < r.lse.size(); ++i) {
    const double diff = std::isinf(r.ref_lse[i]) && r.lse[i] == r.ref_lse[i] ? 0.0 : std::fabs(r.lse[i] - r.ref_lse[i]);
    r.lse_max_abs = std::isnan(diff) ? INFINITY : std::max(r.lse_max_abs, diff);
    r.lse_excess = std::isnan(diff) ? INFINITY : std::max(r.lse_excess, diff / tol[i]);
  }
  return r;
}

void expect_accurate(const DecodeResult& r, const std::string& what) {
  SCOPED_TRACE(what + ": " + r.metrics.report());
  EXPECT_EQ(r.append_byte_mismatches, 0) << "append kernel rows differ from the host quantizer";
  EXPECT_EQ(r.metrics.nonfinite, 0);
  EXPECT_GE(r.metrics.cosine, 0.9999);
  EXPECT_LE(r.metrics.rel_l2, 1e-2);
  EXPECT_LE(r.lse_excess, 1.0) << "LSE off by up to " << r.lse_max_abs << " (see lse_tolerance)";
  std::printf("  %-72s %s lseMaxAbs=%.2e (%.2f of the tolerance)\n", what.c_str(), r.metrics.report().c_str(),
              r.lse_max_abs, r.lse_excess);
}

const char* kFormats[] = {"fp16 pv=fp16 out=fp16", "bf16 pv=bf16 out=bf16", "int8:per_token pv=int8:per_token out=fp16",
                          "int4:per_token pv=int4:per_token out=bf16", "int4:per_group pv=int4:per_group out=fp16",
                          "fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16"};

std::string decode_spec(const std::string& fmt, int d, int gqa, bool causal) {
  return "decode qk=" + fmt + " d=" + std::to_string(d) + " gqa=" + std::to_string(gqa) + (causal ? " causal" : "");
}

class DecodeGpu : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

const std::vector<int> kRaggedLens = {1, 15, 16, 17, 4097};

TEST_F(DecodeGpu, EveryFormatContiguousAndPagedMatchesReference) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : kFormats)
    for (int page : {0, 16})
      for (bool causal : {false, true}) {
        DecodeCase c{decode_spec(fmt, 128, causal ? 4 : 5, causal), 2, causal ? 4 : 1, kRaggedLens, page};
        expect_accurate(run_case(rt, c, seed), c.spec + (page ? " paged16" : ""));
      }
}

TEST_F(DecodeGpu, HeadDimsAndGqaRatios) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (int d : {64, 256})
    for (const char* fmt : {kFormats[1], kFormats[3], kFormats[4], kFormats[5]}) {
      DecodeCase c{decode_spec(fmt, d, 8, true), 2, 2, {33, 1000}, d == 64 ? 32 : 0};
      expect_accurate(run_case(rt, c, seed), c.spec);
    }
  for (int gqa : {1, 4, 5, 8, 16})
    for (int q_len : {1, 3, 16}) {
      DecodeCase c{decode_spec(kFormats[2], 128, gqa, true), gqa == 1 ? 4 : 1, q_len, {q_len, 300, 1025}, 0};
      expect_accurate(run_case(rt, c, seed), c.spec + " q=" + std::to_string(q_len));
    }
}

TEST_F(DecodeGpu, SplitCountsAgree) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  std::vector<double> first;
  for (int splits : {1, 2, 7, 32, 128}) {
    DecodeCase c{decode_spec(kFormats[3], 128, 4, false), 2, 1, kRaggedLens, 0, splits};
    const DecodeResult r = run_case(rt, c, seed);
    expect_accurate(r, c.spec + " splits=" + std::to_string(splits));
    if (first.empty()) first = r.out;
    else EXPECT_LE(test::compare(first, r.out).rel_l2, 5e-3) << "splits=" << splits << " vs splits=1";
  }
}

// The ends of the shape range: batch 512 (ragged lengths 1..96, every CTA row of the grid busy) and one
// sequence of 256k tokens (splits of thousands of tokens each; offsets past 2^31 bytes would be wrong in
// 32-bit arithmetic only at larger batches, but a 256k row index times the row stride is exercised here).
TEST_F(DecodeGpu, Batch512AndA256kCache) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  std::vector<int> lens(512);
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = 1 + static_cast<int>((i * 37 + seed % 97) % 96);
  for (const char* fmt : {kFormats[2], kFormats[3]}) {
    DecodeCase wide{decode_spec(fmt, 128, 4, false), 2, 1, lens, 0};
    expect_accurate(run_case(rt, wide, seed), wide.spec + " batch=512");
    DecodeCase wide_gemv{decode_spec(fmt, 128, 4, false) + " flow=gemv", 2, 1, lens, 16};
    expect_accurate(run_case(rt, wide_gemv, seed), wide_gemv.spec + " paged16 batch=512");
  }
  for (const char* fmt : {kFormats[1], kFormats[3]}) {
    DecodeCase longest{decode_spec(fmt, 128, 8, false), 1, 1, {262144}, 0};
    expect_accurate(run_case(rt, longest, seed), longest.spec + " kv=262144");
  }
}

TEST_F(DecodeGpu, PagedAndContiguousGiveIdenticalBits) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[0], kFormats[2], kFormats[4], kFormats[5]}) {
    // One tiling for both: the default may differ between the two (int4 per_group on sm_90a).
    DecodeCase c{decode_spec(fmt, 128, 4, true), 2, 2, {17, 700, 4097}, 0, 7, Tiling{16, 32, 4, 2}};
    const DecodeResult contiguous = run_case(rt, c, seed);
    c.page_size = 16;
    const DecodeResult paged = run_case(rt, c, seed);
    EXPECT_EQ(contiguous.out_bits, paged.out_bits) << c.spec;
  }
}

// softmax=sas against the exact float64 softmax: SAS drops every term below e^-6 of the running max and
// its cubic is within 8e-4 of e^x (tests/templates/decode/sas_test.cpp), so the output stays close (the same
// thresholds as the exact mode) while each row's sum can only lose mass: its LSE is at most the exact
// one plus the cubic's error, and on these long rows clearly below it for some rows (the mode is live).
// (A reference that applies SAS against the final row max is no closer: the kernel applies it against
// running maxima, which keeps tail terms that the final max would drop.)
TEST_F(DecodeGpu, SasSoftmaxStaysCloseToExactAndOnlyDropsMass) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[1], kFormats[2], kFormats[3]})
    for (bool causal : {false, true}) {
      DecodeCase c{decode_spec(fmt, 128, 4, causal) + " softmax=sas", 2, causal ? 4 : 1, kRaggedLens, causal ? 16 : 0};
      const DecodeResult r = run_case(rt, c, seed);
      SCOPED_TRACE(c.spec + ": " + r.metrics.report());
      EXPECT_EQ(r.metrics.nonfinite, 0);
      EXPECT_GE(r.metrics.cosine, 0.9999);
      EXPECT_LE(r.metrics.rel_l2, 1e-2);
      int lower = 0;
      double most_above = -1, most_below = 0;
      for (size_t i = 0; i < r.lse.size(); ++i) {
        const double diff = r.lse[i] - r.ref_lse[i];
        most_above = std::max(most_above, diff);
        most_below = std::min(most_below, diff);
        lower += diff < -1e-3;
      }
      EXPECT_LE(most_above, 5e-3) << "SAS added mass";
      EXPECT_GT(lower, 0) << "no row lost mass: is softmax=sas applied?";
      std::printf("  %-72s %s  LSE - exact in [%.3g, %.3g], %d of %zu rows below\n", c.spec.c_str(),
                  r.metrics.report().c_str(), most_below, most_above, lower, r.lse.size());
    }
}

TEST_F(DecodeGpu, RefusesMisalignedCaches) {
  DecodeCase c{decode_spec(kFormats[3], 128, 4, false), 1, 1, {8}, 0};
  const Spec s = spec_of(c);
  rt::DeviceBuffer buf(4096);
  DecodeCall call;
  call.spec = s;
  call.problem = Problem{1, 4, 1, 1, 8};
  call.q = call.o = buf.as<void>();
  call.kv_lens = buf.as<int>();
  call.cache.k = call.cache.v = buf.as<char>() + 4;   // not 16-byte aligned
  call.cache.capacity = 8;
  EXPECT_THROW(rt.decode(call, nullptr), Error);
  call.cache.k = call.cache.v = buf.as<void>();
  call.cache.capacity = 6;   // not a multiple of 4
  EXPECT_THROW(rt.decode(call, nullptr), Error);
}

}  // namespace
}  // namespace qattn
