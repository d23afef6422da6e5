// The FlashQ cache's runtime calls (include/qattn/flashq.hpp): the checks of a call, then the pack
// kernels of templates/qattn/decode/flashq_pack.cuh on the caller's stream. Every check runs before the
// runtime touches the GPU, so bad input is reported the same way with or without a device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "qattn/decode/flashq_params.h"
#include "qattn/decode/kv_layout.h"
#include "qattn/error.hpp"
#include "generator/render.hpp"
#include "generator/render_helpers.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

constexpr int kThreads = 128;
constexpr long long kMaxGridYz = 65535;

bool aligned(const void* p, std::uintptr_t to) { return reinterpret_cast<std::uintptr_t>(p) % to == 0; }

[[noreturn]] void bad(const char* what, const std::string& why) { throw_bad_input(std::string(what) + ": " + why); }

void check_spec(const Spec& spec, const char* what) {
  if (spec.phase != Phase::decode || spec.qk.fmt != Fmt::flashq)
    bad(what, "takes a decode spec with qk=flashq:per_channel pv=flashq:per_channel (got '" + to_string(spec) + "')");
  require(validate(spec));
}

// New tokens: fp16/bf16, [batch, heads_kv, n, d] with the given strides (elements; 0,0,0 = contiguous).
TensorRef token_ref(const char* what, const void* x, const char* name, long long sb, long long sh, long long ss,
                    int heads_kv, int n, int d) {
  if (!x) bad(what, std::string(name) + " is null; pass a device pointer to the new tokens");
  if (!aligned(x, 2)) bad(what, std::string(name) + " must be 2-byte aligned (fp16/bf16 elements)");
  if (sb < 0 || sh < 0 || ss < 0) bad(what, "token strides must be >= 0 (elements)");
  if (sb == 0 && sh == 0 && ss == 0) {
    ss = d;
    sh = 1LL * n * d;
    sb = heads_kv * sh;
  }
  return TensorRef{const_cast<void*>(x), sb, sh, ss, 1};
}

void check_sizes(const char* what, int batch, int heads_kv, int n, const char* n_name, int n_max) {
  if (batch < 1 || heads_kv < 1) bad(what, "batch and heads_kv must be >= 1");
  if (n < 1 || n > n_max)
    bad(what, std::string(n_name) + " = " + std::to_string(n) + " is out of range; accepted: 1.." + std::to_string(n_max));
  if (2LL * batch > kMaxGridYz || heads_kv > kMaxGridYz)
    bad(what, "batch (at most " + std::to_string(kMaxGridYz / 2) + ") or heads_kv (at most " + std::to_string(kMaxGridYz) +
                  ") exceeds the launch grid");
}

// The parts of a view that do not depend on the bit widths: pointers, alignment, the buffer's strides,
// the block addressing. Returns the blocks a sequence can hold.
int check_view(const char* what, const Spec& spec, const FlashQCacheView& c, int heads_kv) {
  if (!c.k_blocks || !c.v_blocks || !c.k_buffer || !c.v_buffer)
    bad(what, "the cache's k_blocks, v_blocks, k_buffer and v_buffer must be device pointers (one is null)");
  if (!c.heads || !c.compressed_lens || !c.buffer_lens || !c.k_scale8 || !c.v_scale8)
    bad(what, "the cache's heads, compressed_lens, buffer_lens, k_scale8 and v_scale8 must be device pointers (one is null)");
  if (!aligned(c.k_blocks, 16) || !aligned(c.v_blocks, 16) || !aligned(c.k_buffer, 16) || !aligned(c.v_buffer, 16))
    bad(what, "the cache's blocks and buffers must be 16-byte aligned");
  if (!aligned(c.heads, 4) || !aligned(c.compressed_lens, 4) || !aligned(c.buffer_lens, 4) || !aligned(c.k_scale8, 4) ||
      !aligned(c.v_scale8, 4))
    bad(what, "the cache's heads, lengths and scales must be 4-byte aligned");
  const int d = spec.head_dim;
  const long long head = c.buffer_head_stride ? c.buffer_head_stride : flashq_buffer_head_stride(d);
  const long long page = c.buffer_page_stride ? c.buffer_page_stride : heads_kv * head;
  if (head % 16 || page % 16 || head < flashq_buffer_head_stride(d) || page < heads_kv * head)
    bad(what, "buffer strides must be multiples of 16 bytes holding " + std::to_string(kv::kFlashQBufferRows) + " rows of " +
                  std::to_string(flashq_buffer_row_bytes(d)) + " bytes per head and every head per sequence (head stride " +
                  std::to_string(head) + ", sequence stride " + std::to_string(page) + ")");
  if (spec.paged) {
    if (!c.block_table || !aligned(c.block_table, 4) || c.table_stride < 1)
      bad(what, "a paged FlashQ cache needs block_table (4-byte aligned) and table_stride >= 1 (got table_stride " +
                    std::to_string(c.table_stride) + ")");
    return c.table_stride;
  }
  if (c.max_blocks < 1)
    bad(what, "a contiguous FlashQ cache needs max_blocks >= 1 (got " + std::to_string(c.max_blocks) +
                  "); the spec's 'paged' token selects a paged cache");
  return c.max_blocks;
}

void check_bits(const char* what, const std::vector<int>& bits, const char* name, int heads_kv) {
  if (static_cast<int>(bits.size()) != heads_kv)
    bad(what, std::string("cache.bits.") + name + " needs one entry per KV head (" + std::to_string(heads_kv) + "), got " +
                  std::to_string(bits.size()));
  for (int b : bits)
    if (b != 2 && b != 4) bad(what, std::string("cache.bits.") + name + " has " + std::to_string(b) + " bits; accepted: 2, 4");
}

long long page_stride(const char* what, long long given, const FlashQLayout& l, const char* name) {
  if (given == 0) return l.page_bytes;
  if (given % 16 || given < l.page_bytes)
    bad(what, std::string(name) + " = " + std::to_string(given) + " must be a multiple of 16 of at least the page's " +
                  std::to_string(l.page_bytes) + " bytes");
  return given;
}

void check_scales(const char* what, const std::vector<float>& s, const char* name, int heads_kv) {
  if (s.empty()) return;
  if (static_cast<int>(s.size()) != heads_kv)
    bad(what, std::string(name) + " needs one scale per KV head (" + std::to_string(heads_kv) + "), got " + std::to_string(s.size()));
  for (float x : s)
    if (!(x > 0.f) || !std::isfinite(x)) bad(what, std::string(name) + " must be finite and > 0 (got " + std::to_string(x) + ")");
}

FlashQCacheRef cache_ref(const Spec& spec, const FlashQCacheView& c, int heads_kv, int which, long long page) {
  FlashQCacheRef r{};
  r.blocks = static_cast<unsigned char*>(which == 0 ? c.k_blocks : c.v_blocks);
  r.buffer = static_cast<unsigned char*>(which == 0 ? c.k_buffer : c.v_buffer);
  r.scale8 = which == 0 ? c.k_scale8 : c.v_scale8;
  r.page_stride = page;
  r.buffer_head_stride = c.buffer_head_stride ? c.buffer_head_stride : flashq_buffer_head_stride(spec.head_dim);
  r.buffer_page_stride = c.buffer_page_stride ? c.buffer_page_stride : heads_kv * r.buffer_head_stride;
  return r;
}

FlashQPackParams pack_params(const Spec& spec, const FlashQCacheView& c, int batch, int heads_kv, int n, int max_blocks) {
  FlashQPackParams p{};
  p.heads = c.heads;
  p.block_table = spec.paged ? c.block_table : nullptr;
  p.compressed_lens = c.compressed_lens;
  p.buffer_lens = c.buffer_lens;
  p.batch = batch;
  p.heads_kv = heads_kv;
  p.n = n;
  p.max_blocks = max_blocks;
  p.table_stride = c.table_stride;
  return p;
}

CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

FlashQPrefillInfo Runtime::flashq_prefill(const FlashQPrefillCall& call, void* stream) {
  const char* what = "flashq_prefill";
  check_spec(call.spec, what);
  check_sizes(what, call.batch, call.heads_kv, call.n, "n", std::numeric_limits<int>::max() - kv::kFlashQBlock);
  const int d = call.spec.head_dim, batch = call.batch, heads = call.heads_kv;
  const FlashQCacheView& c = call.cache;
  const int max_blocks = check_view(what, call.spec, c, heads);
  std::vector<int> lens = call.lens.empty() ? std::vector<int>(static_cast<size_t>(batch), call.n) : call.lens;
  if (static_cast<int>(lens.size()) != batch) bad(what, "lens needs one entry per sequence (or none for n each)");
  long long total = 0;
  for (int len : lens) {
    if (len < 0 || len > call.n) bad(what, "a lens entry is " + std::to_string(len) + "; accepted: 0..n (" + std::to_string(call.n) + ")");
    if (len / kv::kFlashQBlock > max_blocks)
      bad(what, std::to_string(len) + " tokens need " + std::to_string(len / kv::kFlashQBlock) + " blocks; the cache holds " +
                    std::to_string(max_blocks) + " per sequence");
    total += len;
  }
  if (!c.bits.k_bits.empty()) check_bits(what, c.bits.k_bits, "k_bits", heads);
  if (!c.bits.v_bits.empty()) check_bits(what, c.bits.v_bits, "v_bits", heads);
  check_scales(what, call.k_scale8, "k_scale8", heads);
  check_scales(what, call.v_scale8, "v_scale8", heads);
  if (call.n_low < -1 || call.n_low > heads)
    bad(what, "n_low = " + std::to_string(call.n_low) + "; accepted: -1 (half) or 0.." + std::to_string(heads));
  const bool need_stats = c.bits.k_bits.empty() || c.bits.v_bits.empty() || call.k_scale8.empty() || call.v_scale8.empty();
  if (need_stats && total == 0) bad(what, "no prefill tokens to take statistics from; pass the bits and the scales");
  FlashQPackParams p = pack_params(call.spec, c, batch, heads, call.n, max_blocks);
  p.x[0] = token_ref(what, call.k, "k", call.sb, call.sh, call.ss, heads, call.n, d);
  p.x[1] = token_ref(what, call.v, "v", call.sb, call.sh, call.ss, heads, call.n, d);

  const Spec spec = resolve(call.spec);
  const CUstream s = static_cast<CUstream>(stream);
  const int dev = impl_->options.device;
  std::vector<int> compressed(lens.size()), buffered(lens.size());
  for (size_t b = 0; b < lens.size(); ++b) {
    compressed[b] = lens[b] / kv::kFlashQBlock * kv::kFlashQBlock;
    buffered[b] = lens[b] % kv::kFlashQBlock;
  }
  rt::copy_to_device_async(dptr(c.compressed_lens), compressed.data(), compressed.size() * sizeof(int), s, dev);
  rt::copy_to_device_async(dptr(c.buffer_lens), buffered.data(), buffered.size() * sizeof(int), s, dev);
  const rt::Dim3 grid{static_cast<unsigned>((call.n + kv::kFlashQBlock - 1) / kv::kFlashQBlock), static_cast<unsigned>(heads),
                      static_cast<unsigned>(2 * batch)};

  FlashQPrefillInfo info;
  if (need_stats) {
    // [2][heads][2][d]: min (from +inf) then max (from -inf) per channel.
    const size_t per = static_cast<size_t>(heads) * d;
    std::vector<float> stats(4 * per);
    for (size_t i = 0; i < stats.size(); ++i)
      stats[i] = (i / d) % 2 == 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    rt::DeviceBuffer ws(stats.size() * sizeof(float), dev);
    ws.upload_async(stats.data(), ws.size(), s);
    p.stats = ws.as<float>();
    impl_->load_helper(gen::flashq_kernel("stats", spec), [&] { return gen::render_flashq_stats(spec); })->launch(grid, rt::Dim3{kThreads, 1, 1}, 0, s, p);
    ws.download_async(stats.data(), ws.size(), s);
    {
      rt::ContextGuard guard(dev);
      QATTN_CU(cuStreamSynchronize, s);
    }
    p.stats = nullptr;
    for (int which = 0; which < 2; ++which) {
      FlashQChannelStats& st = which == 0 ? info.k_stats : info.v_stats;
      st.heads_kv = heads;
      st.d = d;
      for (int h = 0; h < heads; ++h) {
        const float* mn = stats.data() + (static_cast<size_t>(which * heads + h) * 2) * d;
        st.min.insert(st.min.end(), mn, mn + d);
        st.max.insert(st.max.end(), mn + d, mn + 2 * d);
      }
    }
  }
  info.bits = c.bits;
  if (info.bits.k_bits.empty()) {
    info.k_priority = flashq_priority(info.k_stats);
    info.bits.k_bits = flashq_choose_bits(info.k_priority, call.n_low);
  }
  if (info.bits.v_bits.empty()) {
    info.v_priority = flashq_priority(info.v_stats);
    info.bits.v_bits = flashq_choose_bits(info.v_priority, call.n_low);
  }
  info.k_scale8 = call.k_scale8.empty() ? flashq_universal_scales(info.k_stats) : call.k_scale8;
  info.v_scale8 = call.v_scale8.empty() ? flashq_universal_scales(info.v_stats) : call.v_scale8;
  const FlashQLayout kl = flashq_layout(d, info.bits.k_bits), vl = flashq_layout(d, info.bits.v_bits);
  info.k_page_stride = page_stride(what, c.k_page_stride, kl, "cache.k_page_stride");
  info.v_page_stride = page_stride(what, c.v_page_stride, vl, "cache.v_page_stride");

  const std::vector<int> table = flashq_head_table(kl, vl);
  rt::copy_to_device_async(dptr(c.heads), table.data(), table.size() * sizeof(int), s, dev);
  rt::copy_to_device_async(dptr(c.k_scale8), info.k_scale8.data(), info.k_scale8.size() * sizeof(float), s, dev);
  rt::copy_to_device_async(dptr(c.v_scale8), info.v_scale8.data(), info.v_scale8.size() * sizeof(float), s, dev);
  p.cache[0] = cache_ref(spec, c, heads, 0, info.k_page_stride);
  p.cache[1] = cache_ref(spec, c, heads, 1, info.v_page_stride);
  impl_->load_helper(gen::flashq_kernel("prefill", spec), [&] { return gen::render_flashq_prefill(spec); })->launch(grid, rt::Dim3{kThreads, 1, 1}, 0, s, p);
  return info;
}

void Runtime::flashq_append(const FlashQAppendCall& call, void* stream) {
  const char* what = "flashq_append";
  check_spec(call.spec, what);
  check_sizes(what, call.batch, call.heads_kv, call.n_new, "n_new", 16);
  const int d = call.spec.head_dim, batch = call.batch, heads = call.heads_kv;
  const FlashQCacheView& c = call.cache;
  const int max_blocks = check_view(what, call.spec, c, heads);
  check_bits(what, c.bits.k_bits, "k_bits", heads);
  check_bits(what, c.bits.v_bits, "v_bits", heads);
  FlashQPackParams p = pack_params(call.spec, c, batch, heads, call.n_new, max_blocks);
  p.x[0] = token_ref(what, call.k, "k", call.sb, call.sh, call.ss, heads, call.n_new, d);
  p.x[1] = token_ref(what, call.v, "v", call.sb, call.sh, call.ss, heads, call.n_new, d);
  const long long k_page = page_stride(what, c.k_page_stride, flashq_layout(d, c.bits.k_bits), "cache.k_page_stride");
  const long long v_page = page_stride(what, c.v_page_stride, flashq_layout(d, c.bits.v_bits), "cache.v_page_stride");

  const Spec spec = resolve(call.spec);
  p.cache[0] = cache_ref(spec, c, heads, 0, k_page);
  p.cache[1] = cache_ref(spec, c, heads, 1, v_page);
  const CUstream s = static_cast<CUstream>(stream);
  auto append = impl_->load_helper(gen::flashq_kernel("append", spec), [&] { return gen::render_flashq_append(spec); });
  auto lens = impl_->load_helper(gen::flashq_kernel("lens", spec), [&] { return gen::render_flashq_lens(spec); });
  append->launch(rt::Dim3{static_cast<unsigned>(heads), 2, static_cast<unsigned>(batch)}, rt::Dim3{kThreads, 1, 1}, 0, s, p);
  lens->launch(rt::Dim3{static_cast<unsigned>((batch + kThreads - 1) / kThreads), 1, 1}, rt::Dim3{kThreads, 1, 1}, 0, s, p);
}

}  // namespace qattn
