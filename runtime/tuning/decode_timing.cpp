#include "runtime/tuning/decode_timing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "qattn/error.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/tuning/host_data.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "qattn/decode/kv_layout.h"

namespace qattn::rt {
namespace {

// Tokens generated on the host per head and appended again and again until the cache is full: the
// kernels' speed does not depend on the values, and generating every token of a 64 x 8 x 64k cache
// would cost seconds per shape. Sequence b reads the block shifted by b rows (an overlapping stride),
// so sequences differ without a block each. Never zeros: K has biased channels, every value is random.
constexpr int kFillChunk = 1024;
constexpr int kPageSize = 64;   // paged specs: pages of 64 tokens in a shuffled order

std::string cache_key(const Spec& s, const Problem& p) {
  return std::string(to_string(s.qk.fmt)) + ":" + to_string(s.qk.gran) + "|" + to_string(s.out) + "|d" +
         std::to_string(s.head_dim) + (s.paged ? "|paged" : "") + "|b" + std::to_string(p.batch) + "|hkv" +
         std::to_string(p.heads_kv) + "|kv" + std::to_string(p.kv_len);
}

}  // namespace

struct DecodeTimingBench::Caches {
  std::string key;
  int copies = 0;
  std::vector<DeviceBuffer> k, v;   // one K and one V cache per copy
  DeviceBuffer k_scale, v_scale, table, lens;
  KvCacheView view;                 // copy 0's pointers; the others differ only in k and v
};

DecodeTimingBench::DecodeTimingBench(Runtime::Impl& runtime) : rt_(runtime) {}
DecodeTimingBench::~DecodeTimingBench() = default;

DecodeTimingBench::Caches& DecodeTimingBench::caches_for(const Spec& s, const Problem& p, int copies) {
  const std::string key = cache_key(s, p);
  if (caches_ && caches_->key == key && caches_->copies >= copies) return *caches_;
  caches_.reset();   // free the previous shape's caches before allocating the next
  auto c = std::make_unique<Caches>();
  c->key = key;
  c->copies = copies;
  const int ordinal = rt_.options.device;
  const int d = s.head_dim;
  std::mt19937_64 rng(0x5eedULL ^ std::hash<std::string>{}(key));

  // Layout: contiguous rows (capacity rounded to the 4-token alignment), or shuffled pages.
  const int capacity = (p.kv_len + 3) / 4 * 4;
  const int pages_per_seq = (p.kv_len + kPageSize - 1) / kPageSize;
  long long bytes = 0;
  if (s.paged) {
    std::vector<int> table(static_cast<size_t>(p.batch) * pages_per_seq);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    c->table = DeviceBuffer::from(table, ordinal);
    c->view.page_size = kPageSize;
    c->view.block_table = c->table.as<int>();
    c->view.table_stride = pages_per_seq;
    bytes = kv_cache_bytes(s, static_cast<int>(table.size()), p.heads_kv, kPageSize);
  } else {
    c->view.capacity = capacity;
    bytes = kv_cache_bytes(s, p.batch, p.heads_kv, capacity);
  }

  // Host tokens [hkv, chunk, d] plus one row per extra sequence, in the cache's input type; fp8 caches
  // get their per-head scales from them.
  const int chunk = std::min(kFillChunk, p.kv_len);
  const long long rows = 1LL * p.heads_kv * chunk + p.batch - 1;
  const Fmt io = s.out;
  std::vector<uint16_t> k_bits(static_cast<size_t>(rows * d)), v_bits(k_bits.size());
  {
    const std::vector<float> kf = random_activations(rng, rows, d, 6, 0), vf = random_activations(rng, rows, d, 0, 0);
    for (size_t i = 0; i < k_bits.size(); ++i) {
      k_bits[i] = to_bits(io, kf[i]);
      v_bits[i] = to_bits(io, vf[i]);
    }
  }
  if (s.qk.fmt == Fmt::fp8e4m3) {
    // One scale for every head: with the shifted reads, any row can land in any head.
    float k_amax = 0, v_amax = 0;
    for (size_t i = 0; i < k_bits.size(); ++i) {
      k_amax = std::max(k_amax, std::fabs(from_bits(io, k_bits[i])));
      v_amax = std::max(v_amax, std::fabs(from_bits(io, v_bits[i])));
    }
    const std::vector<float> ks(static_cast<size_t>(p.heads_kv), k_amax / kv::kFp8Max),
        vs(static_cast<size_t>(p.heads_kv), v_amax / kv::kFp8Max);
    c->k_scale = DeviceBuffer::from(ks, ordinal);
    c->v_scale = DeviceBuffer::from(vs, ordinal);
    c->view.k_head_scale = c->k_scale.as<float>();
    c->view.v_head_scale = c->v_scale.as<float>();
  }
  const DeviceBuffer k_new = DeviceBuffer::from(k_bits, ordinal), v_new = DeviceBuffer::from(v_bits, ordinal);
  c->lens = DeviceBuffer::from(std::vector<int>(static_cast<size_t>(p.batch), p.kv_len), ordinal);

  Stream stream(ordinal);
  for (int copy = 0; copy < copies; ++copy) {
    c->k.emplace_back(static_cast<size_t>(bytes), ordinal);
    c->v.emplace_back(static_cast<size_t>(bytes), ordinal);
    KvCacheView view = c->view;
    view.k = c->k.back().as<void>();
    view.v = c->v.back().as<void>();
    for (int start = 0; start < p.kv_len; start += chunk) {
      // The chunk's first n tokens; sequence b starts b rows into the block.
      AppendKvCall add;
      add.spec = s;
      add.batch = p.batch;
      add.heads_kv = p.heads_kv;
      add.n_new = std::min(chunk, p.kv_len - start);
      add.k = k_new.as<void>();
      add.v = v_new.as<void>();
      add.sb = d;
      add.sh = 1LL * chunk * d;
      add.ss = d;
      add.cache = view;
      DeviceBuffer starts = DeviceBuffer::from(std::vector<int>(static_cast<size_t>(p.batch), start), ordinal);
      add.start = starts.as<int>();
      rt_.append_kv(add, stream.get());
      stream.synchronize();   // `starts` is freed at the end of this iteration
    }
  }
  caches_ = std::move(c);
  return *caches_;
}

std::vector<double> DecodeTimingBench::samples_us(const Spec& spec_in, const Tiling& tiling, const Problem& p,
                                                  int splits, const TimingOptions& timing) {
  const Spec s = rt_.resolve(spec_in);
  if (s.phase != Phase::decode) throw_bad_input("decode timing takes decode specs; got '" + to_string(s) + "'");
  if (s.qk.fmt == Fmt::flashq)
    throw_bad_input("decode timing covers the row-cache formats; a flashq cache is filled by flashq_prefill "
                    "(time it with bench/decode_bench); accepted: fp16, bf16, int8, int4, fp8e4m3 caches");
  require(validate(s, p));
  const int ordinal = rt_.options.device;
  // Enough cache copies that together they overflow L2 three times: a decode step in a model never
  // finds its layer's cache in L2.
  const double one = 2.0 * kv_cache_bytes(s, p.batch, p.heads_kv, (p.kv_len + 3) / 4 * 4);
  const DeviceInfo info = query_device(ordinal);
  const int copies = std::clamp(static_cast<int>(std::ceil(3.0 * (info.l2_bytes > 0 ? info.l2_bytes : 50e6) / one)), 1,
                                std::max(1, timing.rotate_buffers * 2));
  // A sweep point whose caches would crowd the GPU is a failed point, not an out-of-memory crash.
  if (one * copies > 0.4 * static_cast<double>(info.total_mem_bytes))
    throw Error(ErrorKind::failure, "decode timing of " + to_string(p) + " needs " +
                                        std::to_string(static_cast<long long>(one * copies / 1e6)) +
                                        " MB of caches, over 40% of the GPU's memory");
  Caches& c = caches_for(s, p, copies);

  const int d = s.head_dim;
  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL);
  const long long q_rows = 1LL * p.batch * p.heads_q * p.q_len;
  const std::vector<float> qf = random_activations(rng, q_rows, d, 0, 4);
  std::vector<uint16_t> q_bits(qf.size());
  for (size_t i = 0; i < qf.size(); ++i) q_bits[i] = to_bits(s.out, qf[i]);
  const DeviceBuffer q = DeviceBuffer::from(q_bits, ordinal);
  DeviceBuffer o(q_bits.size() * 2, ordinal), lse(static_cast<size_t>(q_rows) * 4, ordinal);
  Stream stream(ordinal);

  DecodeCall call;
  call.spec = s;
  call.problem = p;
  call.q = q.as<void>();
  call.o = o.as<void>();
  call.kv_lens = c.lens.as<int>();
  call.splits = splits;
  call.tiling = tiling;
  auto on_copy = [&](int i) {
    call.cache = c.view;
    call.cache.k = c.k[static_cast<size_t>(i)].as<void>();
    call.cache.v = c.v[static_cast<size_t>(i)].as<void>();
  };
  if (s.softmax == SoftmaxMode::unified_max) {
    // The calibration a user would run: LSEs of one exact decode of the same data, then phi from them.
    Spec exact = s;
    exact.softmax = SoftmaxMode::exact;
    DecodeCall probe = call;
    on_copy(0);
    probe.cache = call.cache;
    probe.spec = exact;
    probe.tiling = Tiling{0, 0, 0, 0};
    probe.splits = 0;
    probe.lse = lse.as<float>();
    rt_.decode(probe, stream.get());
    stream.synchronize();
    UnifiedMaxCalibrationOptions co;
    co.sample = ScoreSample::row_lse;
    co.keys_per_row = p.kv_len;
    co.window = unified_max_window(unified_max_p_type(s));
    const UnifiedMaxCalibration cal = calibrate_unified_max(lse.to_vector<float>(), co);
    call.unified_max = cal.params;
  }
  for (int i = 0; i < timing.warmup; ++i) {
    on_copy(i % c.copies);
    rt_.decode(call, stream.get());
  }
  Event start(ordinal), stop(ordinal);
  std::vector<double> samples;
  for (int i = 0; i < timing.repeats; ++i) {
    on_copy(i % c.copies);
    start.record(stream.get());
    rt_.decode(call, stream.get());
    stop.record(stream.get());
    stop.synchronize();
    samples.push_back(1000.0 * stop.elapsed_ms_since(start));
  }
  return samples;
}

}  // namespace qattn::rt
