// The FlashQ cache's writers on the GPU (Runtime::flashq_prefill / flashq_append) against the host
// model (tests/common/flashq_reference), byte for byte: blocks, INT8 buffers, the head table, the
// universal scales and the lengths, after the prefill and after every decode step. Every buffer starts
// poisoned (0xFF) and the model writes only what the kernels may write, so equal bytes also mean the
// regions past the lengths were left alone. Prefill lengths 1, 63, 64, 65, 4097 in one ragged batch;
// steps of 1..16 new tokens crossing several flushes; contiguous and paged; d 64, 128, 256; bits chosen
// by the runtime (statistics) or given, mixed 2/4 per head; given scales small enough to clamp; a cache
// that runs out of blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qattn/flashq.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/flashq_reference.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostFlashQCache;

struct PackCase {
  std::string name;
  int d = 128;
  bool paged = false;
  Fmt io = Fmt::bf16;
  int heads_kv = 2;
  std::vector<int> lens;          // prefill tokens per sequence
  FlashQHeads bits;               // empty: the runtime chooses (n_low = heads / 2)
  float scale_factor = 0;         // 0: the runtime's scales; else given: factor x absmax / 127 (< 1 clamps)
  std::vector<int> steps;         // n_new of each decode step
  int max_blocks = 0;             // 0: room for every token
  bool bshd = false;              // tokens in [b, s, h, d] order (strides), else [b, h, s, d]
};

// K/V-like fp16/bf16 tokens [batch][heads][n][d] as float (exact), with channel offsets.
std::vector<float> random_tokens(int batch, int heads, int n, int d, Fmt io, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::uniform_real_distribution<double> offset(2.0, 8.0);
  std::vector<double> bias(static_cast<size_t>(heads) * d, 0.0);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < 3; ++i) bias[static_cast<size_t>(h) * d + rng() % d] = (rng() % 2 ? 1 : -1) * offset(rng) * (h + 1);
  std::vector<float> x(static_cast<size_t>(batch) * heads * n * d);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < d; ++c)
          x[((static_cast<size_t>(b) * heads + h) * n + t) * d + c] = static_cast<float>(
              test::half_bits_to_double(test::to_half_bits(normal(rng) + bias[static_cast<size_t>(h) * d + c], io), io));
  return x;
}

// Device storage of x in [b, h, s, d] or [b, s, h, d] order.
std::vector<std::uint16_t> encode(const std::vector<float>& x, int batch, int heads, int n, int d, Fmt io, bool bshd) {
  std::vector<std::uint16_t> out(x.size());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < d; ++c) {
          const size_t at = bshd ? ((static_cast<size_t>(b) * n + t) * heads + h) * d + c : ((static_cast<size_t>(b) * heads + h) * n + t) * d + c;
          out[at] = test::to_half_bits(x[((static_cast<size_t>(b) * heads + h) * n + t) * d + c], io);
        }
  return out;
}

// Counts differing bytes and names the first.
struct Diff {
  long long bytes = 0;
  std::string first;
  void compare(const std::string& what, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
    if (got.size() != want.size()) {
      bytes += 1;
      if (first.empty()) first = what + ": sizes differ";
      return;
    }
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i]) {
        if (first.empty())
          first = what + " byte " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
        ++bytes;
      }
  }
  template <class T>
  void compare(const std::string& what, const rt::DeviceBuffer& got, const std::vector<T>& want) {
    const std::vector<unsigned char> g = got.to_vector<unsigned char>();
    std::vector<unsigned char> w(want.size() * sizeof(T));
    if (!want.empty()) std::memcpy(w.data(), want.data(), w.size());
    compare(what, g, w);
  }
};

class FlashQPackGpu : public test::GpuTest {
 protected:
  Runtime rt{[] {
    RuntimeOptions o;
    o.use_cache = false;
    return o;
  }()};

  void run_case(const PackCase& pc, std::uint64_t seed);
};

void FlashQPackGpu::run_case(const PackCase& pc, std::uint64_t seed) {
  SCOPED_TRACE(pc.name);
  std::mt19937_64 rng(seed);
  const int d = pc.d, heads = pc.heads_kv, batch = static_cast<int>(pc.lens.size());
  const int n = *std::max_element(pc.lens.begin(), pc.lens.end());
  const Spec spec = parse_spec(std::string("decode qk=flashq:per_channel pv=flashq:per_channel out=") + to_string(pc.io) +
                               " d=" + std::to_string(d) + " gqa=4" + (pc.paged ? " paged" : ""));
  const std::vector<float> k = random_tokens(batch, heads, n, d, pc.io, rng, 1.0);
  const std::vector<float> v = random_tokens(batch, heads, n, d, pc.io, rng, 0.5);

  // The host's choice of bits and scales, from the same statistics.
  std::vector<float> kmin, kmax, vmin, vmax;
  test::flashq_reference_stats(k, batch, heads, n, d, pc.lens, &kmin, &kmax);
  test::flashq_reference_stats(v, batch, heads, n, d, pc.lens, &vmin, &vmax);
  const bool choose = pc.bits.k_bits.empty();
  const std::vector<int> k_bits = choose ? test::flashq_reference_bits(test::flashq_reference_priority(kmin, kmax, heads, d)) : pc.bits.k_bits;
  const std::vector<int> v_bits = choose ? test::flashq_reference_bits(test::flashq_reference_priority(vmin, vmax, heads, d)) : pc.bits.v_bits;
  std::vector<float> k_scale = test::flashq_reference_scales(kmin, kmax, heads, d);
  std::vector<float> v_scale = test::flashq_reference_scales(vmin, vmax, heads, d);
  if (pc.scale_factor > 0)
    for (std::vector<float>* s : {&k_scale, &v_scale})
      for (float& x : *s) x *= pc.scale_factor;

  int total = 0;
  for (int s : pc.steps) total += s;
  const int max_blocks = pc.max_blocks ? pc.max_blocks : (n + total) / 64 + 1;
  // With chosen bits the pages are sized for 4 bits everywhere (the caller cannot know the choice).
  const long long kp = choose ? flashq_max_page_bytes(d, heads) : 0, vp = kp;
  HostFlashQCache model = test::make_flashq_cache(d, batch, k_bits, v_bits, max_blocks, pc.paged, seed + 1, kp, vp);
  model.k_scale8 = k_scale;
  model.v_scale8 = v_scale;

  rt::DeviceBuffer k_blocks = rt::DeviceBuffer::from(model.k_blocks), v_blocks = rt::DeviceBuffer::from(model.v_blocks);
  rt::DeviceBuffer k_buffer = rt::DeviceBuffer::from(model.k_buffer.bytes), v_buffer = rt::DeviceBuffer::from(model.v_buffer.bytes);
  rt::DeviceBuffer heads_table = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(4 * heads), -1));
  rt::DeviceBuffer comp = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), -1));
  rt::DeviceBuffer buf = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), -1));
  rt::DeviceBuffer ks = rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(heads), -1.f));
  rt::DeviceBuffer vs = rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(heads), -1.f));
  rt::DeviceBuffer table = rt::DeviceBuffer::from(pc.paged ? model.block_table : std::vector<int>{0});

  FlashQCacheView view;
  view.k_blocks = k_blocks.as<void>();
  view.v_blocks = v_blocks.as<void>();
  view.k_page_stride = kp;
  view.v_page_stride = vp;
  if (pc.paged) {
    view.block_table = table.as<int>();
    view.table_stride = max_blocks;
  } else {
    view.max_blocks = max_blocks;
  }
  view.heads = heads_table.as<int>();
  view.k_buffer = k_buffer.as<void>();
  view.v_buffer = v_buffer.as<void>();
  view.compressed_lens = comp.as<int>();
  view.buffer_lens = buf.as<int>();
  view.k_scale8 = ks.as<float>();
  view.v_scale8 = vs.as<float>();
  if (!choose) view.bits = pc.bits;

  auto check = [&](const std::string& when) {
    Diff diff;
    diff.compare("k blocks", k_blocks, model.k_blocks);
    diff.compare("v blocks", v_blocks, model.v_blocks);
    diff.compare("k buffer", k_buffer, model.k_buffer.bytes);
    diff.compare("v buffer", v_buffer, model.v_buffer.bytes);
    diff.compare("head table", heads_table, model.head_table());
    diff.compare("compressed_lens", comp, model.compressed_lens);
    diff.compare("buffer_lens", buf, model.buffer_lens);
    diff.compare("k scales", ks, model.k_scale8);
    diff.compare("v scales", vs, model.v_scale8);
    EXPECT_EQ(diff.bytes, 0) << when << ": " << diff.first;
    return diff.bytes == 0;
  };

  rt::DeviceBuffer k_dev = rt::DeviceBuffer::from(encode(k, batch, heads, n, d, pc.io, pc.bshd));
  rt::DeviceBuffer v_dev = rt::DeviceBuffer::from(encode(v, batch, heads, n, d, pc.io, pc.bshd));
  FlashQPrefillCall pre;
  pre.spec = spec;
  pre.batch = batch;
  pre.heads_kv = heads;
  pre.n = n;
  pre.k = k_dev.as<void>();
  pre.v = v_dev.as<void>();
  if (pc.bshd) {
    pre.sb = 1LL * n * heads * d;
    pre.sh = d;
    pre.ss = 1LL * heads * d;
  }
  pre.lens = pc.lens;
  pre.cache = view;
  if (pc.scale_factor > 0) {
    pre.k_scale8 = k_scale;
    pre.v_scale8 = v_scale;
  }
  const FlashQPrefillInfo info = rt.flashq_prefill(pre, nullptr);
  EXPECT_EQ(info.bits.k_bits, k_bits);
  EXPECT_EQ(info.bits.v_bits, v_bits);
  EXPECT_EQ(info.k_scale8, k_scale);
  EXPECT_EQ(info.v_scale8, v_scale);
  EXPECT_EQ(info.k_page_stride, model.k_page_stride);
  if (choose) {
    EXPECT_EQ(info.k_stats.min, kmin);   // device atomics = host min / max, exactly
    EXPECT_EQ(info.v_stats.max, vmax);
  }
  test::flashq_prefill(model, k, v, n, pc.lens);
  if (!check("after the prefill")) return;

  view.bits = info.bits;
  view.k_page_stride = info.k_page_stride;
  view.v_page_stride = info.v_page_stride;
  int flushes = 0;
  for (size_t step = 0; step < pc.steps.size(); ++step) {
    const int n_new = pc.steps[step];
    // Decode tokens a bit wider than the prefill's, so the universal scale clamps some.
    const std::vector<float> kn = random_tokens(batch, heads, n_new, d, pc.io, rng, 1.3);
    const std::vector<float> vn = random_tokens(batch, heads, n_new, d, pc.io, rng, 0.7);
    rt::DeviceBuffer kd = rt::DeviceBuffer::from(encode(kn, batch, heads, n_new, d, pc.io, pc.bshd));
    rt::DeviceBuffer vd = rt::DeviceBuffer::from(encode(vn, batch, heads, n_new, d, pc.io, pc.bshd));
    FlashQAppendCall app;
    app.spec = spec;
    app.batch = batch;
    app.heads_kv = heads;
    app.n_new = n_new;
    app.k = kd.as<void>();
    app.v = vd.as<void>();
    if (pc.bshd) {
      app.sb = 1LL * n_new * heads * d;
      app.sh = d;
      app.ss = 1LL * heads * d;
    }
    app.cache = view;
    rt.flashq_append(app, nullptr);
    const std::vector<int> before = model.compressed_lens;
    test::flashq_append(model, kn, vn, n_new);
    for (int b = 0; b < batch; ++b) flushes += model.compressed_lens[static_cast<size_t>(b)] != before[static_cast<size_t>(b)];
    if (!check("after step " + std::to_string(step) + " (n_new " + std::to_string(n_new) + ")")) return;
  }
  std::printf("  %-60s %zu steps, %d flushes, bits K", pc.name.c_str(), pc.steps.size(), flushes);
  for (int b : k_bits) std::printf(" %d", b);
  std::printf(" V");
  for (int b : v_bits) std::printf(" %d", b);
  std::printf("\n");
}

std::vector<int> random_steps(int count, int most, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> s(static_cast<size_t>(count));
  for (int& x : s) x = 1 + static_cast<int>(rng() % most);
  return s;
}

const std::vector<int> kLens = {1, 63, 64, 65, 4097};

TEST_F(FlashQPackGpu, ChosenBitsContiguous) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  PackCase c;
  c.name = "d128 bf16 contiguous, bits and scales chosen";
  c.heads_kv = 4;
  c.lens = kLens;
  c.steps = random_steps(90, 16, seed);
  run_case(c, seed);
}

TEST_F(FlashQPackGpu, GivenBitsAndClampingScalesPagedBshd) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  PackCase c;
  c.name = "d128 fp16 paged bshd, given bits, scales x0.5";
  c.io = Fmt::fp16;
  c.paged = true;
  c.bshd = true;
  c.heads_kv = 3;
  c.lens = kLens;
  c.bits = FlashQHeads{{4, 2, 2}, {2, 4, 2}};
  c.scale_factor = 0.5f;
  c.steps = random_steps(90, 16, seed + 5);
  run_case(c, seed);
}

TEST_F(FlashQPackGpu, HeadDims) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  {
    PackCase c;
    c.name = "d64 bf16 paged, one token per step";
    c.d = 64;
    c.paged = true;
    c.lens = {1, 65, 130};
    c.steps = std::vector<int>(200, 1);
    run_case(c, seed);
  }
  {
    PackCase c;
    c.name = "d256 fp16 contiguous, 16 tokens per step";
    c.d = 256;
    c.io = Fmt::fp16;
    c.lens = {64, 63, 200};
    c.bits = FlashQHeads{{2, 4}, {4, 4}};
    c.steps = std::vector<int>(30, 16);
    run_case(c, seed + 1);
  }
  {
    PackCase c;
    c.name = "d256 bf16 paged, chosen";
    c.d = 256;
    c.paged = true;
    c.heads_kv = 5;
    c.lens = {130, 1, 64};
    c.steps = random_steps(40, 16, seed + 2);
    run_case(c, seed + 2);
  }
}

TEST_F(FlashQPackGpu, OutOfBlocksStopsAtTheBufferCapacity) {
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (bool paged : {false, true}) {
    PackCase c;
    c.name = std::string("d128 bf16 2 blocks per sequence") + (paged ? " paged" : "");
    c.paged = paged;
    c.lens = {100, 10};
    c.bits = FlashQHeads{{4, 2}, {2, 4}};
    c.max_blocks = 2;
    c.steps = random_steps(40, 16, seed + 3);
    run_case(c, seed);
  }
}

}  // namespace
}  // namespace qattn
