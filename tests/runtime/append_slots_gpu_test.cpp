// append_kv by slot mapping (vLLM's layout: token i to cache row slot_mapping[i]) on the GPU: for every
// cache format, contiguous and paged (a scattered block table), a ragged batch's tokens packed in a
// shuffled order with padding tokens (-1) and slots past the cache between them give the cache the bytes
// of appending each sequence by position, byte for byte, and nothing else changes. (The refusals are
// CPU checks: tests/runtime/c_api/c_api_decode_validation.c.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

const char* kFormats[] = {"fp16 pv=fp16 out=fp16", "bf16 pv=bf16 out=bf16", "int8:per_token pv=int8:per_token out=fp16",
                          "int4:per_token pv=int4:per_token out=bf16", "int4:per_group pv=int4:per_group out=fp16",
                          "fp8e4m3:per_head pv=fp8e4m3:per_head out=bf16"};

class AppendSlots : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};
};

struct Pools {
  test::HostKvCache host;
  rt::DeviceBuffer k, v, table, k_scale, v_scale;
  KvCacheView view(const Spec& s) {
    KvCacheView c;
    c.k = k.as<void>();
    c.v = v.as<void>();
    c.head_stride = host.head_stride;
    c.page_stride = host.page_stride;
    if (s.paged) {
      c.page_size = host.page_size;
      c.block_table = table.as<int>();
      c.table_stride = host.table_stride;
    } else {
      c.capacity = host.capacity;
    }
    if (s.qk.fmt == Fmt::fp8e4m3) {
      c.k_head_scale = k_scale.as<float>();
      c.v_head_scale = v_scale.as<float>();
    }
    return c;
  }
};

Pools make_pools(const test::HostKvCache& host) {
  Pools p;
  p.host = host;
  p.k = rt::DeviceBuffer::from(host.bytes);
  p.v = rt::DeviceBuffer::from(host.bytes);
  p.table = rt::DeviceBuffer::from(host.paged ? host.block_table : std::vector<int>{0});
  std::vector<float> scales(static_cast<size_t>(host.heads_kv));
  for (size_t h = 0; h < scales.size(); ++h) scales[h] = 0.05f + 0.01f * static_cast<float>(h);
  p.k_scale = rt::DeviceBuffer::from(scales);
  p.v_scale = rt::DeviceBuffer::from(scales);
  return p;
}

TEST_F(AppendSlots, EqualsAppendingEachSequenceByPosition) {
  const std::vector<int> lens = {1, 15, 16, 17, 130};
  const int batch = static_cast<int>(lens.size()), heads_kv = 3, max_len = 130, capacity = 132;
  for (const char* fmt : kFormats)
    for (int page_size : {0, 16})
      for (int d : {64, 128}) {
        const Spec s = parse_spec(std::string("decode qk=") + fmt + " d=" + std::to_string(d) + (page_size ? " paged" : ""));
        SCOPED_TRACE(to_string(s));
        const test::HostKvCache host =
            page_size ? test::make_paged(s.qk.fmt, s.qk.gran, d, batch, heads_kv, page_size,
                                         (capacity + page_size - 1) / page_size, 7)
                      : test::make_contiguous(s.qk.fmt, s.qk.gran, d, batch, heads_kv, capacity);
        // The tokens, [b, h, t, d] (positions path) and packed [token, h, d] (slots path) from one draw.
        const test::HostTensor x = test::random_tensor({batch, heads_kv, max_len, d}, test::Layout::bhsd, test::k_like(), 11);
        const test::HostTensor y = test::random_tensor({batch, heads_kv, max_len, d}, test::Layout::bhsd, test::v_like(), 12);
        const std::vector<std::uint16_t> xk = test::encode(x, s.out), xv = test::encode(y, s.out);

        // Positions: each sequence's tokens 0 .. max_len - 1 (longer than its length: rows it owns).
        Pools by_pos = make_pools(host);
        rt::DeviceBuffer dk = rt::DeviceBuffer::from(xk), dv = rt::DeviceBuffer::from(xv);
        rt::DeviceBuffer start = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), 0));
        AppendKvCall a;
        a.spec = s;
        a.batch = batch;
        a.heads_kv = heads_kv;
        a.n_new = max_len;
        a.k = dk.as<void>();
        a.v = dv.as<void>();
        a.cache = by_pos.view(s);
        a.start = start.as<int>();
        rt.append_kv(a, nullptr);

        // Slots: every (b, t) token once, in a shuffled order, with padding and out-of-range tokens mixed in.
        std::vector<std::pair<int, int>> tokens;
        for (int b = 0; b < batch; ++b)
          for (int t = 0; t < max_len; ++t) tokens.emplace_back(b, t);
        const int extra = 9;
        for (int e = 0; e < extra; ++e) tokens.emplace_back(-1 - e % 3, e);   // -1: padding, -2 / -3: past the cache
        std::shuffle(tokens.begin(), tokens.end(), std::mt19937(5));
        const long long num_slots = page_size ? static_cast<long long>(host.batch) * host.table_stride * page_size
                                              : static_cast<long long>(batch) * capacity;
        const int n = static_cast<int>(tokens.size());
        std::vector<long long> slots(static_cast<size_t>(n));
        std::vector<std::uint16_t> pk(static_cast<size_t>(n) * heads_kv * d), pv(pk.size());
        std::mt19937 noise(3);
        for (int i = 0; i < n; ++i) {
          const auto [b, t] = tokens[static_cast<size_t>(i)];
          if (b < 0) {
            slots[static_cast<size_t>(i)] = b == -1 ? -1 : num_slots + t;
            for (int h = 0; h < heads_kv; ++h)   // garbage that must land nowhere
              for (int c = 0; c < d; ++c) {
                const size_t at = (static_cast<size_t>(i) * heads_kv + h) * d + static_cast<size_t>(c);
                pk[at] = pv[at] = static_cast<std::uint16_t>(0x3c00u + noise() % 0x400u);
              }
            continue;
          }
          slots[static_cast<size_t>(i)] =
              page_size ? static_cast<long long>(host.block_table[static_cast<size_t>(b) * host.table_stride + t / page_size]) *
                                  page_size + t % page_size
                        : static_cast<long long>(b) * capacity + t;
          for (int h = 0; h < heads_kv; ++h)
            for (int c = 0; c < d; ++c) {
              const size_t from = ((static_cast<size_t>(b) * heads_kv + h) * max_len + t) * d + static_cast<size_t>(c);
              const size_t at = (static_cast<size_t>(i) * heads_kv + h) * d + static_cast<size_t>(c);
              pk[at] = xk[from];
              pv[at] = xv[from];
            }
        }
        Pools by_slot = make_pools(host);
        rt::DeviceBuffer sk = rt::DeviceBuffer::from(pk), sv = rt::DeviceBuffer::from(pv), sm = rt::DeviceBuffer::from(slots);
        AppendKvCall b;
        b.spec = s;
        b.batch = 1;
        b.heads_kv = heads_kv;
        b.n_new = n;
        b.k = sk.as<void>();
        b.v = sv.as<void>();
        b.sb = 0, b.sh = d, b.ss = static_cast<long long>(heads_kv) * d;   // packed [token, head, d]
        b.cache = by_slot.view(s);
        b.slot_mapping = sm.as<long long>();
        b.num_slots = num_slots;
        rt.append_kv(b, nullptr);

        for (int which = 0; which < 2; ++which) {
          const auto want = (which ? by_pos.v : by_pos.k).to_vector<unsigned char>();
          const auto got = (which ? by_slot.v : by_slot.k).to_vector<unsigned char>();
          ASSERT_EQ(want.size(), got.size());
          long long differing = 0;
          for (size_t i = 0; i < want.size(); ++i) differing += want[i] != got[i];
          EXPECT_EQ(differing, 0) << (which ? "V" : "K") << " cache bytes differ between the two appends";
          long long written = 0;
          for (size_t i = 0; i < want.size(); ++i) written += want[i] != host.bytes[i];
          EXPECT_GT(written, 0) << "nothing was appended";
        }

        // Plans of both calls (made with null device pointers), run into fresh pools: the same bytes. A
        // quantized cache also appends K-smoothed through a plan that sets the mean, against append_kv().
        const bool quantized = s.qk.fmt != Fmt::fp16 && s.qk.fmt != Fmt::bf16;
        for (int smooth = 0; smooth <= (quantized ? 1 : 0); ++smooth)
          for (const AppendKvCall* call : {&a, &b}) {
            Pools eager = make_pools(host), planned = make_pools(host);
            rt::DeviceBuffer mean_eager(sizeof(float) * heads_kv * d, 0), mean_planned(sizeof(float) * heads_kv * d, 0);
            AppendKvCall e = *call;
            e.cache = eager.view(s);
            e.cache.k_mean = smooth ? mean_eager.as<float>() : nullptr;
            e.init_k_mean = smooth;
            rt.append_kv(e, nullptr);
            AppendKvCall shape = e;   // device pointers null; slot_mapping (non-null) names the write mode
            shape.k = shape.v = shape.cache.k = shape.cache.v = nullptr;
            shape.start = nullptr;
            const std::unique_ptr<AppendPlan> plan = rt.plan_append(shape);
            AppendRun run;
            const KvCacheView view = planned.view(s);
            run.k = call->k, run.v = call->v;
            run.k_cache = view.k, run.v_cache = view.v;
            run.block_table = view.block_table;
            run.k_head_scale = view.k_head_scale, run.v_head_scale = view.v_head_scale;
            run.k_mean = smooth ? mean_planned.as<float>() : nullptr;
            run.start = call->start;
            run.slot_mapping = call->slot_mapping;
            rt.run(*plan, run, nullptr);
            for (int which = 0; which < 2; ++which)
              EXPECT_EQ((which ? eager.v : eager.k).to_vector<unsigned char>(), (which ? planned.v : planned.k).to_vector<unsigned char>())
                  << (which ? "V" : "K") << " bytes of a plan's run, " << (call == &a ? "by position" : "by slot")
                  << (smooth ? ", K-smoothed" : "");
            if (smooth) {
              EXPECT_EQ(mean_eager.to_vector<float>(), mean_planned.to_vector<float>());
            }
            run.k_mean = smooth ? nullptr : mean_planned.as<float>();   // the other K-smoothing mode: refused
            EXPECT_THROW(rt.run(*plan, run, nullptr), Error);
          }
      }
}

}  // namespace
}  // namespace qattn
