// K smoothing of a KV cache (KvCacheView::k_mean) on the GPU, for every quantized row format, contiguous
// and paged, on K with the channel bias of real keys (tests/common/random_data.hpp, k_like):
//  - an append with init_k_mean sets the mean of its tokens (against a float64 mean) and stores k - mean
//    byte for byte as the host quantizer of kv_layout.h does;
//  - decode over the smoothed cache gives the attention of the rows it holds (softmax does not see the
//    shift) and the LSE of the true keys; against float64 attention over the unquantized tokens its
//    error is below that of the same cache without smoothing (int8, int4);
//  - prefill over the cache reads the true keys back (the gather adds the mean), output and LSE;
//  - a decode plan made for the smoothed cache gives decode()'s bits and refuses a run without k_mean.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostKvCache;

constexpr int kBatch = 3, kHeadsKv = 2, kGqa = 4, kD = 128, kMeanRows = 4096;
const std::vector<int> kLens = {17, 300, 1000};

// Float64 attention of one query over keys[t], values[t] (t < len): output row and natural-log LSE.
void attend(const double* q, const std::vector<std::vector<double>>& keys, const std::vector<std::vector<double>>& values,
            int len, double scale, double* o, double* lse) {
  std::vector<double> s(static_cast<size_t>(len));
  double most = -INFINITY;
  for (int t = 0; t < len; ++t) {
    double dot = 0;
    for (int c = 0; c < kD; ++c) dot += q[c] * keys[static_cast<size_t>(t)][static_cast<size_t>(c)];
    s[static_cast<size_t>(t)] = scale * dot;
    most = std::max(most, s[static_cast<size_t>(t)]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - most));
  for (int c = 0; c < kD; ++c) {
    double acc = 0;
    for (int t = 0; t < len; ++t) acc += s[static_cast<size_t>(t)] * values[static_cast<size_t>(t)][static_cast<size_t>(c)];
    o[c] = acc / sum;
  }
  *lse = most + std::log(sum);
}

// One cache (K and V) on the device with its host model.
struct Cache {
  HostKvCache k, v;
  rt::DeviceBuffer dk, dv, table, scales;
  KvCacheView view;
};

Cache make_cache(const Spec& s, int page, float k_scale, float v_scale, std::uint64_t seed) {
  const int capacity = 1024;
  Cache c;
  c.k = page ? test::make_paged(s.qk.fmt, s.qk.gran, kD, kBatch, kHeadsKv, page, capacity / page, seed)
             : test::make_contiguous(s.qk.fmt, s.qk.gran, kD, kBatch, kHeadsKv, capacity);
  c.v = c.k;
  std::fill(c.k.head_scale.begin(), c.k.head_scale.end(), k_scale);
  std::fill(c.v.head_scale.begin(), c.v.head_scale.end(), v_scale);
  c.dk = rt::DeviceBuffer::from(c.k.bytes);
  c.dv = rt::DeviceBuffer::from(c.v.bytes);
  c.table = rt::DeviceBuffer::from(page ? c.k.block_table : std::vector<int>{0});
  std::vector<float> both = c.k.head_scale;
  both.insert(both.end(), c.v.head_scale.begin(), c.v.head_scale.end());
  c.scales = rt::DeviceBuffer::from(both);
  c.view.k = c.dk.as<void>();
  c.view.v = c.dv.as<void>();
  if (page) {
    c.view.page_size = page;
    c.view.block_table = c.table.as<int>();
    c.view.table_stride = c.k.table_stride;
  } else {
    c.view.capacity = capacity;
  }
  if (s.qk.fmt == Fmt::fp8e4m3) {
    c.view.k_head_scale = c.scales.as<float>();
    c.view.v_head_scale = c.scales.as<float>() + kHeadsKv;
  }
  return c;
}

// Dequantized rows [t][d] of sequence b, KV head h.
std::vector<std::vector<double>> rows_of(const HostKvCache& c, int b, int h, int len) {
  std::vector<std::vector<double>> out(static_cast<size_t>(len), std::vector<double>(kD));
  for (int t = 0; t < len; ++t) test::read_token(c, b, h, t, out[static_cast<size_t>(t)].data());
  return out;
}

class KvSmoothing : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

TEST_F(KvSmoothing, AppendDecodeAndPrefillOverASmoothedCache) {
  const char* formats[] = {"int8:per_token pv=int8:per_token out=fp16", "int4:per_token pv=int4:per_token out=bf16",
                           "int4:per_group pv=int4:per_group out=fp16", "fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16"};
  const int max_len = *std::max_element(kLens.begin(), kLens.end());
  const double scale = 1.0 / std::sqrt(double(kD));
  for (const char* fmt : formats)
    for (int page : {0, 64}) {
      const Spec s = parse_spec(std::string("decode qk=") + fmt + " d=128 gqa=4" + (page ? " paged" : ""));
      const Fmt io = s.out;
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(to_string(s) + " " + test::seed_note(seed));
      test::HostTensor k_in = test::random_tensor({kBatch, kHeadsKv, max_len, kD}, test::Layout::bhsd, test::k_like(), seed);
      test::HostTensor v_in = test::random_tensor({kBatch, kHeadsKv, max_len, kD}, test::Layout::bhsd, test::v_like(), seed + 1);
      test::HostTensor q_in = test::random_tensor({kBatch, kHeadsKv * kGqa, 1, kD}, test::Layout::bhsd, test::q_like(), seed + 2);
      for (test::HostTensor* t : {&k_in, &v_in, &q_in}) test::round_to(*t, io);

      // The mean an append over every token sets: its first kMeanRows tokens in (sequence, token) order.
      std::vector<double> want_mean(static_cast<size_t>(kHeadsKv) * kD, 0.0);
      const int counted = std::min(kBatch * max_len, kMeanRows);
      for (int h = 0; h < kHeadsKv; ++h)
        for (int r = 0; r < counted; ++r)
          for (int c = 0; c < kD; ++c) want_mean[static_cast<size_t>(h) * kD + c] += k_in.at(r / max_len, h, r % max_len, c) / counted;
      // fp8: head scales that hold the smoothed K (|k - mean| well under 40) and V.
      Cache smooth = make_cache(s, page, 12.f / kv::kFp8Max, 40.f / kv::kFp8Max, seed + 3);
      Cache plain = make_cache(s, page, 40.f / kv::kFp8Max, 40.f / kv::kFp8Max, seed + 3);
      std::vector<float> poison(static_cast<size_t>(kHeadsKv) * kD);
      test::fill_nan(poison);
      rt::DeviceBuffer mean = rt::DeviceBuffer::from(poison);
      smooth.view.k_mean = mean.as<float>();

      rt::DeviceBuffer dk = rt::DeviceBuffer::from(test::encode(k_in, io)), dv = rt::DeviceBuffer::from(test::encode(v_in, io));
      rt::DeviceBuffer start = rt::DeviceBuffer::from(std::vector<int>(kBatch, 0));
      for (Cache* c : {&smooth, &plain}) {
        AppendKvCall append;
        append.spec = s;
        append.batch = kBatch;
        append.heads_kv = kHeadsKv;
        append.n_new = max_len;
        append.k = dk.as<void>();
        append.v = dv.as<void>();
        append.cache = c->view;
        append.start = start.as<int>();
        append.init_k_mean = c == &smooth;
        rt.append_kv(append, nullptr);
      }
      const std::vector<float> got_mean = mean.to_vector<float>();
      double mean_err = 0;
      for (size_t i = 0; i < got_mean.size(); ++i) mean_err = std::max(mean_err, std::fabs(got_mean[i] - want_mean[i]));
      EXPECT_LE(mean_err, 1e-3) << "the mean set by init_k_mean (fp32 sums of up to 512 rows per warp)";

      // The rows: k - mean (fp32, as the kernel subtracts) through the host quantizer, byte for byte.
      long long mismatches = 0;
      for (Cache* c : {&smooth, &plain}) {
        const std::vector<unsigned char> got_k = c->dk.to_vector<unsigned char>();
        std::vector<float> x(kD);
        for (int b = 0; b < kBatch; ++b)
          for (int h = 0; h < kHeadsKv; ++h)
            for (int t = 0; t < max_len; ++t) {
              for (int ch = 0; ch < kD; ++ch) {
                const float kv = static_cast<float>(k_in.at(b, h, t, ch));
                x[static_cast<size_t>(ch)] = c == &smooth ? kv - got_mean[static_cast<size_t>(h) * kD + ch] : kv;
              }
              test::write_token(c->k, b, h, t, x.data());
              const long long off = test::row_offset(c->k, b, h, t);
              mismatches += std::memcmp(got_k.data() + off, c->k.bytes.data() + off, static_cast<size_t>(c->k.row_bytes())) != 0;
            }
        c->k.bytes = got_k;
        c->v.bytes = c->dv.to_vector<unsigned char>();
      }
      EXPECT_EQ(mismatches, 0) << "smoothed rows differ from the host quantizer's";

      // Decode both caches, with the LSE.
      const int heads_q = kHeadsKv * kGqa;
      rt::DeviceBuffer q = rt::DeviceBuffer::from(test::encode(q_in, io));
      rt::DeviceBuffer lens = rt::DeviceBuffer::from(kLens);
      struct Out {
        std::vector<double> o, lse;
        std::vector<std::uint16_t> bits;
      };
      auto decode = [&](Cache& c) {
        std::vector<std::uint16_t> o_poison(static_cast<size_t>(kBatch) * heads_q * kD);
        test::fill_nan(o_poison, io);
        std::vector<float> lse_poison(static_cast<size_t>(kBatch) * heads_q);
        test::fill_nan(lse_poison);
        rt::DeviceBuffer o = rt::DeviceBuffer::from(o_poison), lse = rt::DeviceBuffer::from(lse_poison);
        DecodeCall call;
        call.spec = s;
        call.problem = Problem{kBatch, heads_q, kHeadsKv, 1, max_len};
        call.q = q.as<void>();
        call.o = o.as<void>();
        call.cache = c.view;
        call.kv_lens = lens.as<int>();
        call.lse = lse.as<float>();
        rt.decode(call, nullptr);
        Out r;
        r.bits = o.to_vector<std::uint16_t>();
        for (std::uint16_t b : r.bits) r.o.push_back(test::half_bits_to_double(b, io));
        for (float v : lse.to_vector<float>()) r.lse.push_back(v);
        return std::make_pair(r, call);
      };
      auto [got, smooth_call] = decode(smooth);
      const Out unsmoothed = decode(plain).first;

      // References: the rows the cache holds (output; LSE + scale q.mean), the unquantized tokens, and
      // the keys prefill over the cache reads back (rows + mean, rounded to the 16-bit type).
      std::vector<double> ref_rows, ref_exact, lse_rows, o(kD);
      double lse_excess = 0;
      std::vector<double> ref_gather, lse_gather;
      for (int b = 0; b < kBatch; ++b)
        for (int h = 0; h < kHeadsKv; ++h) {
          const int len = kLens[static_cast<size_t>(b)];
          const auto keys = rows_of(smooth.k, b, h, len), values = rows_of(smooth.v, b, h, len);
          std::vector<std::vector<double>> exact_k(static_cast<size_t>(len), std::vector<double>(kD)), exact_v = exact_k, back = keys;
          for (int t = 0; t < len; ++t)
            for (int c = 0; c < kD; ++c) {
              exact_k[static_cast<size_t>(t)][static_cast<size_t>(c)] = k_in.at(b, h, t, c);
              exact_v[static_cast<size_t>(t)][static_cast<size_t>(c)] = v_in.at(b, h, t, c);
              const float x = static_cast<float>(keys[static_cast<size_t>(t)][static_cast<size_t>(c)]) + got_mean[static_cast<size_t>(h) * kD + c];
              back[static_cast<size_t>(t)][static_cast<size_t>(c)] = test::half_bits_to_double(test::to_half_bits(x, io), io);
            }
          for (int g = 0; g < kGqa; ++g) {
            const int hq = h * kGqa + g;
            std::vector<double> qrow(kD);
            double qm = 0, sum_abs_qk = 0;
            for (int c = 0; c < kD; ++c) {
              qrow[static_cast<size_t>(c)] = q_in.at(b, hq, 0, c);
              qm += qrow[static_cast<size_t>(c)] * got_mean[static_cast<size_t>(h) * kD + c];
            }
            for (const auto& key : keys) {
              double sa = 0;
              for (int c = 0; c < kD; ++c) sa += std::fabs(qrow[static_cast<size_t>(c)] * key[static_cast<size_t>(c)]);
              sum_abs_qk = std::max(sum_abs_qk, sa);
            }
            double lse = 0;
            attend(qrow.data(), keys, values, len, scale, o.data(), &lse);
            ref_rows.insert(ref_rows.end(), o.begin(), o.end());
            // int4 per_group K enters the tensor cores as fp16-rounded values (decode_gpu_test's bound).
            const double tol = 1e-2 + (s.qk.gran == Gran::per_group ? std::ldexp(sum_abs_qk * scale, -11) : 0.0);
            const size_t row = static_cast<size_t>(b) * heads_q + hq;
            lse_excess = std::max(lse_excess, std::fabs(got.lse[row] - (lse + scale * qm)) / tol);
            attend(qrow.data(), exact_k, exact_v, len, scale, o.data(), &lse);
            ref_exact.insert(ref_exact.end(), o.begin(), o.end());
            attend(qrow.data(), back, values, len, scale, o.data(), &lse);
            ref_gather.insert(ref_gather.end(), o.begin(), o.end());
            lse_gather.push_back(lse);
          }
        }
      // The rows above are in (b, h_kv, g) order = (b, hq) order, as the outputs.
      const test::ErrorMetrics rows = test::compare(ref_rows, got.o);
      const test::ErrorMetrics vs_exact = test::compare(ref_exact, got.o), plain_exact = test::compare(ref_exact, unsmoothed.o);
      std::printf("[ k smoothing ] %-66s decode vs its rows %s lse %.2f of tol | vs float64 of the tokens: smoothed %s, "
                  "unsmoothed %s\n", to_string(s).c_str(), rows.report().c_str(), lse_excess, vs_exact.report().c_str(),
                  plain_exact.report().c_str());
      EXPECT_EQ(rows.nonfinite, 0);
      EXPECT_GE(rows.cosine, 0.9999);
      EXPECT_LE(rows.rel_l2, 1e-2);
      EXPECT_LE(lse_excess, 1.0) << "the LSE of the true keys";
      if (s.qk.fmt != Fmt::fp8e4m3) {
        EXPECT_LT(vs_exact.rel_l2, plain_exact.rel_l2) << "smoothing took K's channel bias out";
      }

      // Prefill over the smoothed cache: one query token per sequence, which sees every cached token.
      std::vector<int> cu(kBatch + 1);
      for (int b = 0; b <= kBatch; ++b) cu[static_cast<size_t>(b)] = b;
      rt::DeviceBuffer dcu = rt::DeviceBuffer::from(cu);
      std::vector<std::uint16_t> o_poison(static_cast<size_t>(kBatch) * heads_q * kD);
      test::fill_nan(o_poison, io);
      std::vector<float> lse_poison(static_cast<size_t>(kBatch) * heads_q);
      test::fill_nan(lse_poison);
      rt::DeviceBuffer po = rt::DeviceBuffer::from(o_poison), plse = rt::DeviceBuffer::from(lse_poison);
      KvSource source{s, smooth.view, lens.as<int>()};
      AttentionCall pre;
      pre.spec = parse_spec(std::string("prefill qk=") + to_string(io) + " pv=" + to_string(io) + " out=" + to_string(io) +
                            " d=128 gqa=4 causal varlen");
      pre.problem = Problem{kBatch, heads_q, kHeadsKv, 1, max_len};
      pre.q = packed(q.as<void>(), heads_q, kD);
      pre.o = packed(po.as<void>(), heads_q, kD);
      pre.cu_seqlens_q = dcu.as<int>();
      pre.kv_cache = &source;
      pre.lse = plse.as<float>();
      rt.attention(pre, nullptr);
      std::vector<double> pre_o;
      for (std::uint16_t b : po.to_vector<std::uint16_t>()) pre_o.push_back(test::half_bits_to_double(b, io));
      const std::vector<float> pre_lse = plse.to_vector<float>();
      double pre_lse_err = 0;
      for (size_t i = 0; i < pre_lse.size(); ++i) pre_lse_err = std::max(pre_lse_err, std::fabs(pre_lse[i] - lse_gather[i]));
      const test::ErrorMetrics gathered = test::compare(ref_gather, pre_o);
      std::printf("[ k smoothing ] %-66s prefill over it vs its keys + mean %s lseMaxAbs=%.2e\n", to_string(s).c_str(),
                  gathered.report().c_str(), pre_lse_err);
      EXPECT_EQ(gathered.nonfinite, 0);
      EXPECT_GE(gathered.cosine, 0.9999);
      EXPECT_LE(pre_lse_err, 1e-2);

      // A plan made for the smoothed cache: decode()'s bits; a run without k_mean is refused.
      std::unique_ptr<DecodePlan> plan = rt.plan_decode(smooth_call);
      DecodeRun run;
      rt::DeviceBuffer o2 = rt::DeviceBuffer::from(o_poison), lse2 = rt::DeviceBuffer::from(lse_poison);
      run.q = q.as<void>();
      run.o = o2.as<void>();
      run.lse = lse2.as<float>();
      run.k_cache = smooth.view.k;
      run.v_cache = smooth.view.v;
      run.block_table = smooth.view.block_table;
      run.k_head_scale = smooth.view.k_head_scale;
      run.v_head_scale = smooth.view.v_head_scale;
      run.kv_lens = lens.as<int>();
      run.k_mean = mean.as<float>();
      rt.run(*plan, run, nullptr);
      EXPECT_EQ(o2.to_vector<std::uint16_t>(), got.bits) << "a plan's run against decode()";
      std::vector<float> plan_lse = lse2.to_vector<float>();
      for (size_t i = 0; i < plan_lse.size(); ++i) EXPECT_EQ(plan_lse[i], static_cast<float>(got.lse[i])) << "LSE row " << i;
      run.k_mean = nullptr;
      test::expect_bad_input([&] { rt.run(*plan, run, nullptr); }, "every run needs its k_mean");
    }
}

}  // namespace
}  // namespace qattn
