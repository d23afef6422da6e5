// Decode on CUDA cores (flow=gemv, templates/qattn/decode/decode_gemv.cuh) on the GPU: every cache format
// (fp16, bf16, int8:per_token, int4:per_token, int4:per_group, fp8e4m3:per_head), contiguous and paged,
// against the float64 reference on the dequantized cache and against the tensor-core kernel (flow=mma)
// decoding the very same cache.
//
// Each cache is filled once by the library's append kernel (its bytes must equal the host quantizer's),
// rows past each sequence's length are re-poisoned with NaN bytes, and every decode writes into a
// poisoned output and LSE. Lengths 1, 15, 16, 17 and 4097 in one ragged batch; GQA 1, 4, 5, 8, 16;
// 1, 3 or 4 new tokens with and without the causal mask; d 64, 128, 256; every bm (1, 2, 4, 8) with
// several chunk sizes, warps and stages; split counts 1, 2, 7, 32.
// Thresholds: cosine >= 0.9999, relative L2 <= 1e-2 and LSE within 1e-2 of the reference (the gemv
// kernel decodes every format exactly into fp32 and multiplies in fp32); gemv vs mma within the same
// cosine and relative L2.
// softmax=unified_max: a phi that fits every row gives no fallback and the same accuracy; a phi that
// overflows about half of the rows sends exactly those to the exact kernel, whose outputs then equal an
// exact gemv run's bit for bit (same tiling and splits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qattn/decode/decode_gemv_shape.h"
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

const char* kFormats[] = {"fp16 pv=fp16 out=fp16",
                          "bf16 pv=bf16 out=bf16",
                          "int8:per_token pv=int8:per_token out=fp16",
                          "int4:per_token pv=int4:per_token out=bf16",
                          "int4:per_group pv=int4:per_group out=fp16",
                          "fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16"};

const std::vector<int> kRaggedLens = {1, 15, 16, 17, 4097};

// A cache to fill and decode: the spec (without flow, softmax and paged) and the problem.
struct CacheCase {
  std::string fmt;
  int d = 128, gqa = 4;
  bool causal = false;
  int heads_kv = 2, q_len = 1;
  std::vector<int> kv_lens = kRaggedLens;
  int page_size = 0;   // 0: contiguous
  double softmax_scale = 0;   // 0: 1/sqrt(d)

  std::string name() const {
    return fmt + " d=" + std::to_string(d) + " gqa=" + std::to_string(gqa) + (causal ? " causal" : "") +
           " q=" + std::to_string(q_len) + (page_size ? " paged" + std::to_string(page_size) : "");
  }
};

// What one decode call writes.
struct Output {
  std::vector<std::uint16_t> bits;
  std::vector<double> out;
  std::vector<double> lse;
  long long fallback_rows = -1;   // softmax=unified_max: Runtime::decode_fallback_rows
};

// One kernel run's knobs (the cache stays).
struct KernelRun {
  Dataflow flow = Dataflow::gemv;
  Tiling tiling = Tiling{0, 0, 0, 0};   // block_m 0: the runtime's choice
  int splits = 0;
  SoftmaxMode softmax = SoftmaxMode::exact;
  UnifiedMax unified_max;
};

// A cache filled through append_kv (checked against the host quantizer), its queries and the float64
// reference; decode() runs one kernel on it.
class FilledCache {
 public:
  FilledCache(Runtime& rt, const CacheCase& c, std::uint64_t seed) : rt_(rt), c_(c) {
    const Spec s = spec(KernelRun{});
    const int d = c.d, batch = static_cast<int>(c.kv_lens.size());
    heads_q_ = c.heads_kv * c.gqa;
    max_len_ = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
    const int capacity = (max_len_ + 3) / 4 * 4;
    const Fmt io = s.out;

    const test::Shape kv_shape{batch, c.heads_kv, max_len_, d};
    test::HostTensor k_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::k_like(), seed);
    test::HostTensor v_in = test::random_tensor(kv_shape, test::Layout::bhsd, test::v_like(), seed + 1);
    q_in_ = test::random_tensor({batch, heads_q_, c.q_len, d}, test::Layout::bhsd, test::q_like(), seed + 2);
    for (test::HostTensor* t : {&k_in, &v_in, &q_in_}) test::round_to(*t, io);

    for (HostKvCache* host : {&k_host_, &v_host_})
      *host = c.page_size == 0 ? test::make_contiguous(s.qk.fmt, s.qk.gran, d, batch, c.heads_kv, capacity)
                               : test::make_paged(s.qk.fmt, s.qk.gran, d, batch, c.heads_kv, c.page_size,
                                                  (capacity + c.page_size - 1) / c.page_size, seed + 3);
    // fp8: per-head scales max|x| / 448 over every token of the head, shared by the host model and the device.
    for (int which = 0; which < 2 && s.qk.fmt == Fmt::fp8e4m3; ++which) {
      const test::HostTensor& in = which == 0 ? k_in : v_in;
      HostKvCache& host = which == 0 ? k_host_ : v_host_;
      for (int h = 0; h < c.heads_kv; ++h) {
        double amax = 0;
        for (int b = 0; b < batch; ++b)
          for (int t = 0; t < max_len_; ++t)
            for (int ch = 0; ch < d; ++ch) amax = std::max(amax, std::fabs(in.at(b, h, t, ch)));
        host.head_scale[static_cast<size_t>(h)] = static_cast<float>(amax) / kv::kFp8Max;
      }
    }
    k_scale_ = rt::DeviceBuffer::from(k_host_.head_scale);
    v_scale_ = rt::DeviceBuffer::from(v_host_.head_scale);
    k_cache_ = rt::DeviceBuffer::from(k_host_.bytes);
    v_cache_ = rt::DeviceBuffer::from(v_host_.bytes);
    table_ = rt::DeviceBuffer::from(c.page_size ? k_host_.block_table : std::vector<int>{0});
    view_.k = k_cache_.as<void>();
    view_.v = v_cache_.as<void>();
    view_.head_stride = k_host_.head_stride;
    view_.page_stride = k_host_.page_stride;
    if (s.qk.fmt == Fmt::fp8e4m3) {
      view_.k_head_scale = k_scale_.as<float>();
      view_.v_head_scale = v_scale_.as<float>();
    }
    if (c.page_size) {
      view_.page_size = c.page_size;
      view_.block_table = table_.as<int>();
      view_.table_stride = k_host_.table_stride;
    } else {
      view_.capacity = capacity;
    }

    rt::DeviceBuffer k_new = rt::DeviceBuffer::from(test::encode(k_in, io));
    rt::DeviceBuffer v_new = rt::DeviceBuffer::from(test::encode(v_in, io));
    rt::DeviceBuffer start = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), 0));
    AppendKvCall append;
    append.spec = s;
    append.batch = batch;
    append.heads_kv = c.heads_kv;
    append.n_new = max_len_;
    append.k = k_new.as<void>();
    append.v = v_new.as<void>();
    append.cache = view_;
    append.start = start.as<int>();
    rt.append_kv(append, nullptr);

    // The appended bytes against the host quantizer; then every row past a sequence's length poisoned.
    for (int which = 0; which < 2; ++which) {
      HostKvCache& host = which == 0 ? k_host_ : v_host_;
      rt::DeviceBuffer& dev = which == 0 ? k_cache_ : v_cache_;
      const test::HostTensor& in = which == 0 ? k_in : v_in;
      const std::vector<unsigned char> got = dev.to_vector<unsigned char>();
      std::vector<float> x(static_cast<size_t>(d));
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < c.heads_kv; ++h)
          for (int t = 0; t < max_len_; ++t) {
            for (int ch = 0; ch < d; ++ch) x[static_cast<size_t>(ch)] = static_cast<float>(in.at(b, h, t, ch));
            test::write_token(host, b, h, t, x.data());
            const long long off = test::row_offset(host, b, h, t);
            if (std::memcmp(got.data() + off, host.bytes.data() + off, static_cast<size_t>(host.row_bytes())) != 0)
              ++append_mismatches_;
          }
      host.bytes = got;
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < c.heads_kv; ++h)
          for (int t = c.kv_lens[static_cast<size_t>(b)]; t < capacity; ++t)
            std::memset(host.bytes.data() + test::row_offset(host, b, h, t), test::kKvPoison,
                        static_cast<size_t>(host.row_bytes()));
      dev.upload(host.bytes.data(), host.bytes.size());
    }
    q_ = rt::DeviceBuffer::from(test::encode(q_in_, io));
    lens_ = rt::DeviceBuffer::from(c.kv_lens);
    set_softmax_scale(c.softmax_scale);
  }

  // The softmax scale of later decodes (0: 1/sqrt(d)), and the reference for it.
  void set_softmax_scale(double scale) {
    c_.softmax_scale = scale;
    ref_ = test::reference_decode(q_in_.logical(), k_host_, v_host_, c_.kv_lens, heads_q_, c_.q_len, c_.causal, scale,
                                  &ref_lse_);
  }

  Spec spec(const KernelRun& r) const {
    Spec s = parse_spec("decode qk=" + c_.fmt + " d=" + std::to_string(c_.d) + " gqa=" + std::to_string(c_.gqa) +
                        (c_.causal ? " causal" : "") + (c_.page_size ? " paged" : ""));
    s.flow = r.flow;
    s.softmax = r.softmax;
    return s;
  }

  long long rows() const { return static_cast<long long>(c_.kv_lens.size()) * heads_q_ * c_.q_len; }

  // Runs one decode; flags (optional) receives DecodeParams::row_flags of a unified_max run.
  Output decode(const KernelRun& r, std::vector<int>* flags = nullptr) {
    const Spec s = spec(r);
    const int batch = static_cast<int>(c_.kv_lens.size());
    std::vector<std::uint16_t> o_poison(static_cast<size_t>(rows()) * c_.d);
    test::fill_nan(o_poison, s.out);
    rt::DeviceBuffer o = rt::DeviceBuffer::from(o_poison);
    std::vector<float> lse_poison(static_cast<size_t>(rows()));
    test::fill_nan(lse_poison);
    rt::DeviceBuffer lse = rt::DeviceBuffer::from(lse_poison);
    rt::DeviceBuffer flag_words = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(rows()), -1));

    DecodeCall call;
    call.spec = s;
    call.problem = Problem{batch, heads_q_, c_.heads_kv, c_.q_len, max_len_};
    call.q = q_.as<void>();
    call.o = o.as<void>();
    call.cache = view_;
    call.kv_lens = lens_.as<int>();
    call.lse = lse.as<float>();
    call.softmax_scale = static_cast<float>(c_.softmax_scale);
    call.splits = r.splits;
    call.tiling = r.tiling;
    call.unified_max = r.unified_max;
    if (flags) call.row_flags = flag_words.as<int>();
    rt_.decode(call, nullptr);

    Output out;
    if (r.softmax == SoftmaxMode::unified_max) out.fallback_rows = rt_.decode_fallback_rows(nullptr);
    out.bits = o.to_vector<std::uint16_t>();
    for (std::uint16_t bits : out.bits) out.out.push_back(test::half_bits_to_double(bits, s.out));
    for (float v : lse.to_vector<float>()) out.lse.push_back(v);
    if (flags) *flags = flag_words.to_vector<int>();
    return out;
  }

  // Each row's largest visible score x = softmax_scale * q.k (natural-log units), from the host caches.
  std::vector<double> row_max_scores() const {
    const int d = c_.d;
    const double scale = c_.softmax_scale > 0 ? c_.softmax_scale : 1.0 / std::sqrt(double(d));
    std::vector<double> out;
    std::vector<double> k(static_cast<size_t>(d));
    for (int b = 0; b < static_cast<int>(c_.kv_lens.size()); ++b)
      for (int hq = 0; hq < heads_q_; ++hq)
        for (int i = 0; i < c_.q_len; ++i) {
          const int len = c_.kv_lens[static_cast<size_t>(b)];
          const int seen = c_.causal ? std::min(len, len - c_.q_len + 1 + i) : len;
          double best = -INFINITY;
          for (int t = 0; t < seen; ++t) {
            test::read_token(k_host_, b, hq / c_.gqa, t, k.data());
            double dot = 0;
            for (int ch = 0; ch < d; ++ch) dot += q_in_.at(b, hq, i, ch) * k[static_cast<size_t>(ch)];
            best = std::max(best, scale * dot);
          }
          out.push_back(best);
        }
    return out;
  }

  const std::vector<double>& ref() const { return ref_; }
  const std::vector<double>& ref_lse() const { return ref_lse_; }
  long long append_mismatches() const { return append_mismatches_; }
  const CacheCase& c() const { return c_; }

 private:
  Runtime& rt_;
  CacheCase c_;
  int heads_q_ = 0, max_len_ = 0;
  test::HostTensor q_in_;
  HostKvCache k_host_, v_host_;
  rt::DeviceBuffer k_cache_, v_cache_, k_scale_, v_scale_, table_, q_, lens_;
  KvCacheView view_;
  std::vector<double> ref_, ref_lse_;
  long long append_mismatches_ = 0;
};

double lse_max_abs(const std::vector<double>& got, const std::vector<double>& ref) {
  double most = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i]) && got[i] == ref[i]) continue;
    const double diff = std::fabs(got[i] - ref[i]);
    most = std::isnan(diff) ? INFINITY : std::max(most, diff);
  }
  return most;
}

void expect_accurate(const FilledCache& fc, const Output& o, const std::string& what) {
  const test::ErrorMetrics m = test::compare(fc.ref(), o.out);
  const double lse = lse_max_abs(o.lse, fc.ref_lse());
  SCOPED_TRACE(what + ": " + m.report());
  EXPECT_EQ(fc.append_mismatches(), 0) << "append kernel rows differ from the host quantizer";
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_GE(m.cosine, 0.9999);
  EXPECT_LE(m.rel_l2, 1e-2);
  EXPECT_LE(lse, 1e-2) << "LSE";
  std::printf("  %-86s %s lseMaxAbs=%.2e\n", what.c_str(), m.report().c_str(), lse);
}

// gemv and mma on the same cache: the same numbers up to each kernel's rounding (the mma kernel's P
// and, for int4 per_group, its dequantized K and V are fp16), with the thresholds of the reference.
void expect_same_as_mma(const Output& gemv, const Output& mma, const std::string& what) {
  const test::ErrorMetrics m = test::compare(mma.out, gemv.out);
  EXPECT_EQ(m.nonfinite, 0) << what;
  EXPECT_GE(m.cosine, 0.9999) << what << ": gemv vs mma " << m.report();
  EXPECT_LE(m.rel_l2, 1e-2) << what << ": gemv vs mma " << m.report();
}

KernelRun gemv(Tiling t = Tiling{0, 0, 0, 0}, int splits = 0) {
  KernelRun r;
  r.tiling = t;
  r.splits = splits;
  return r;
}

KernelRun mma(int splits = 0) {
  KernelRun r;
  r.flow = Dataflow::mma;
  r.splits = splits;
  return r;
}

std::string tiling_note(const KernelRun& r) {
  return (r.tiling.block_m ? " " + to_string(r.tiling) : std::string(" default")) +
         (r.splits ? " splits=" + std::to_string(r.splits) : std::string());
}

class DecodeGemvGpu : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

TEST_F(DecodeGemvGpu, EveryFormatContiguousAndPagedMatchesReferenceAndMma) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : kFormats)
    for (int page : {0, 16})
      for (bool causal : {false, true}) {
        CacheCase c;
        c.fmt = fmt;
        c.gqa = causal ? 4 : 5;
        c.causal = causal;
        c.q_len = causal ? 4 : 1;
        c.page_size = page;
        FilledCache fc(rt, c, seed);
        const Output g = fc.decode(gemv());
        expect_accurate(fc, g, c.name() + " gemv");
        expect_same_as_mma(g, fc.decode(mma()), c.name());
      }
}

// Every bm with several chunk sizes, warp counts and stages (rows per KV head 5 and 6: the last row
// block is partly empty for bm 2, 4 and 8).
TEST_F(DecodeGemvGpu, EveryBlockShapeMatchesReference) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  struct Point {
    const char* fmt;
    int gqa, q_len;
    bool causal;
  };
  for (const Point& pt : {Point{kFormats[2], 5, 1, false}, Point{kFormats[4], 2, 3, true}, Point{kFormats[1], 3, 2, true}}) {
    CacheCase c;
    c.fmt = pt.fmt;
    c.gqa = pt.gqa;
    c.q_len = pt.q_len;
    c.causal = pt.causal;
    c.kv_lens = {3, 64, 1000};
    FilledCache fc(rt, c, seed);
    for (int bm : {1, 2, 4, 8})
      for (const Tiling& t : {Tiling{bm, 16, 1, 2}, Tiling{bm, 16, 4, 4}, Tiling{bm, 32, 4, 3}, Tiling{bm, 64, 2, 2},
                              Tiling{bm, 32, 8, 2}}) {
        const Spec s = fc.spec(gemv(t));
        if (!decode::gemv_tiling_ok(s.qk.fmt, s.qk.gran, s.head_dim, t.block_m, t.block_n, t.warps, t.stages)) continue;
        expect_accurate(fc, fc.decode(gemv(t, 3)), c.name() + " " + to_string(t));
      }
  }
}

TEST_F(DecodeGemvGpu, HeadDimsAndGqaRatios) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (int d : {64, 256})
    for (const char* fmt : kFormats) {
      CacheCase c;
      c.fmt = fmt;
      c.d = d;
      c.gqa = 8;
      c.causal = true;
      c.q_len = 2;
      c.kv_lens = {33, 1000};
      c.page_size = d == 64 ? 32 : 0;
      FilledCache fc(rt, c, seed);
      for (int bm : {1, 8}) {
        const KernelRun r = gemv(Tiling{bm, d == 256 ? 16 : 32, 4, 2});   // fp16 rows of 512 bytes: bn 16
        const Output g = fc.decode(r);
        expect_accurate(fc, g, c.name() + tiling_note(r));
        if (bm == 8) expect_same_as_mma(g, fc.decode(mma()), c.name());
      }
    }
  for (int gqa : {1, 4, 5, 8, 16})
    for (int q_len : {1, 3}) {
      CacheCase c;
      c.fmt = kFormats[3];
      c.gqa = gqa;
      c.causal = true;
      c.q_len = q_len;
      c.heads_kv = gqa == 1 ? 4 : 1;
      c.kv_lens = {q_len, 300, 1025};
      FilledCache fc(rt, c, seed);
      const Output g = fc.decode(gemv());
      expect_accurate(fc, g, c.name());
      expect_same_as_mma(g, fc.decode(mma()), c.name());
    }
}

TEST_F(DecodeGemvGpu, SplitCountsAgree) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[2], kFormats[5]}) {
    CacheCase c;
    c.fmt = fmt;
    FilledCache fc(rt, c, seed);
    std::vector<double> first;
    for (int splits : {1, 2, 7, 32}) {
      const KernelRun r = gemv(Tiling{4, 32, 4, 2}, splits);
      const Output g = fc.decode(r);
      expect_accurate(fc, g, c.name() + tiling_note(r));
      if (first.empty()) first = g.out;
      else EXPECT_LE(test::compare(first, g.out).rel_l2, 5e-3) << "splits=" << splits << " vs splits=1";
    }
  }
}

TEST_F(DecodeGemvGpu, PagedAndContiguousGiveIdenticalBits) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[0], kFormats[3], kFormats[4], kFormats[5]}) {
    CacheCase c;
    c.fmt = fmt;
    c.causal = true;
    c.q_len = 2;
    c.kv_lens = {17, 700, 4097};
    const KernelRun r = gemv(Tiling{8, 32, 4, 2}, 7);
    const Output contiguous = FilledCache(rt, c, seed).decode(r);
    c.page_size = 16;
    const Output paged = FilledCache(rt, c, seed).decode(r);
    EXPECT_EQ(contiguous.bits, paged.bits) << c.name();
  }
}

// softmax=sas against the exact float64 softmax: as in decode_gpu_test.cpp, SAS may only drop mass
// (terms below e^-6 of the running max; its cubic is within 8e-4 of e^x), and on these long rows it does.
TEST_F(DecodeGemvGpu, SasSoftmaxStaysCloseToExactAndOnlyDropsMass) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[1], kFormats[2], kFormats[3]})
    for (bool causal : {false, true}) {
      CacheCase c;
      c.fmt = fmt;
      c.causal = causal;
      c.q_len = causal ? 4 : 1;
      c.page_size = causal ? 16 : 0;
      FilledCache fc(rt, c, seed);
      KernelRun r = gemv();
      r.softmax = SoftmaxMode::sas;
      const Output g = fc.decode(r);
      const test::ErrorMetrics m = test::compare(fc.ref(), g.out);
      SCOPED_TRACE(c.name() + " sas: " + m.report());
      EXPECT_EQ(m.nonfinite, 0);
      EXPECT_GE(m.cosine, 0.9999);
      EXPECT_LE(m.rel_l2, 1e-2);
      int lower = 0;
      double most_above = -1;
      for (size_t i = 0; i < g.lse.size(); ++i) {
        const double diff = g.lse[i] - fc.ref_lse()[i];
        most_above = std::max(most_above, diff);
        lower += diff < -1e-3;
      }
      EXPECT_LE(most_above, 5e-3) << "SAS added mass";
      EXPECT_GT(lower, 0) << "no row lost mass: is softmax=sas applied?";
    }
}

// The visible rows' largest scores at a softmax scale shrunk until they span at most 14 (natural-log
// units), so that one phi holds every row inside the default window (-9, 8).
std::vector<double> fit_unified_max(FilledCache& fc) {
  auto visible = [](std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isinf(x); }), v.end());
    return v;
  };
  std::vector<double> maxima = visible(fc.row_max_scores());
  const double spread = *std::max_element(maxima.begin(), maxima.end()) - *std::min_element(maxima.begin(), maxima.end());
  if (spread > 14) {
    fc.set_softmax_scale(14 / spread / std::sqrt(double(fc.c().d)));
    maxima = visible(fc.row_max_scores());
  }
  return maxima;
}

// Ragged lengths with every sequence holding at least its 4 new tokens (so every row sees a token: a
// row that sees none has no maximum and always takes the exact path).
const std::vector<int> kUnifiedMaxLens = {4, 15, 16, 17, 4097};

TEST_F(DecodeGemvGpu, UnifiedMaxWithAFittingPhiNeedsNoFallback) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[0], kFormats[3], kFormats[5]})
    for (bool causal : {false, true}) {
      CacheCase c;
      c.fmt = fmt;
      c.causal = causal;
      c.q_len = causal ? 4 : 1;
      c.page_size = causal ? 16 : 0;
      c.kv_lens = kUnifiedMaxLens;
      FilledCache fc(rt, c, seed);
      const std::vector<double> maxima = fit_unified_max(fc);
      const double lo = *std::min_element(maxima.begin(), maxima.end()),
                   hi = *std::max_element(maxima.begin(), maxima.end());
      for (int splits : {1, 7}) {
        KernelRun r = gemv(Tiling{4, 32, 4, 2}, splits);
        r.softmax = SoftmaxMode::unified_max;
        r.unified_max.phi = static_cast<float>((lo + hi) / 2 - 0.5);   // maxima in [phi - 6.5, phi + 7.5]
        std::vector<int> flags;
        const Output g = fc.decode(r, &flags);
        expect_accurate(fc, g, c.name() + " unified_max" + tiling_note(r));
        EXPECT_EQ(g.fallback_rows, 0);
        for (size_t i = 0; i < flags.size(); ++i) ASSERT_EQ(flags[i], kUmSeen) << "row " << i;
      }
    }
}

TEST_F(DecodeGemvGpu, UnifiedMaxFallbackRowsEqualTheExactKernelBitForBit) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (const char* fmt : {kFormats[1], kFormats[2], kFormats[4]})
    for (bool causal : {false, true}) {
      CacheCase c;
      c.fmt = fmt;
      c.causal = causal;
      c.q_len = causal ? 4 : 1;
      c.page_size = causal ? 0 : 16;
      c.kv_lens = kUnifiedMaxLens;
      FilledCache fc(rt, c, seed);
      std::vector<double> maxima = fit_unified_max(fc);
      std::nth_element(maxima.begin(), maxima.begin() + maxima.size() / 2, maxima.end());
      const double median = maxima[maxima.size() / 2];
      for (int splits : {1, 7}) {
        const KernelRun exact = gemv(Tiling{2, 32, 4, 2}, splits);
        KernelRun r = exact;
        r.softmax = SoftmaxMode::unified_max;
        r.unified_max.phi = static_cast<float>(median - 8);   // rows at or above the median overflow
        std::vector<int> flags;
        const Output um = fc.decode(r, &flags);
        const Output ex = fc.decode(exact);
        const std::string what = c.name() + " unified_max" + tiling_note(r);
        const int d = c.d;
        long long fallback = 0;
        std::vector<double> ref_kept, got_kept;
        for (long long row = 0; row < fc.rows(); ++row) {
          if (flags[static_cast<size_t>(row)] != kUmSeen) {
            ++fallback;
            for (int ch = 0; ch < d; ++ch)
              ASSERT_EQ(um.bits[static_cast<size_t>(row * d + ch)], ex.bits[static_cast<size_t>(row * d + ch)])
                  << what << ": fallback row " << row << " channel " << ch;
            EXPECT_EQ(um.lse[static_cast<size_t>(row)], ex.lse[static_cast<size_t>(row)]) << what << ": row " << row;
          } else {
            for (int ch = 0; ch < d; ++ch) {
              ref_kept.push_back(fc.ref()[static_cast<size_t>(row * d + ch)]);
              got_kept.push_back(um.out[static_cast<size_t>(row * d + ch)]);
            }
          }
        }
        EXPECT_EQ(um.fallback_rows, fallback) << what;
        EXPECT_GT(fallback, 0) << what;
        EXPECT_LT(fallback, fc.rows()) << what;
        const test::ErrorMetrics m = test::compare(ref_kept, got_kept);
        EXPECT_GE(m.cosine, 0.9999) << what << ": rows kept from the unified-max kernel: " << m.report();
        EXPECT_LE(m.rel_l2, 1e-2) << what << ": " << m.report();
        std::printf("  %-86s %lld of %lld rows recomputed; kept rows %s\n", what.c_str(), fallback, fc.rows(),
                    m.report().c_str());
      }
    }
}

}  // namespace
}  // namespace qattn
