// The C API's FlashQ calls (include/qattn/qattn.h, "FlashQ") over Runtime::flashq_prefill / flashq_append.
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/api/c_api_decode_structs.hpp"

namespace qattn::capi {
namespace {

constexpr size_t kPrefillFirstSize = offsetof(qattn_flashq_prefill_args, v_scale8) + sizeof(const float*);
constexpr size_t kAppendFirstSize = offsetof(qattn_flashq_append_args, cache) + sizeof(const void*);

qattn_flashq_prefill_args default_prefill_args() {
  qattn_flashq_prefill_args a{};
  a.struct_size = sizeof a;
  a.batch = a.heads_kv = a.n = 1;
  a.n_low = -1;
  return a;
}

qattn_flashq_append_args default_append_args() {
  qattn_flashq_append_args a{};
  a.struct_size = sizeof a;
  a.batch = a.heads_kv = a.n_new = 1;
  return a;
}

void require_heads(int heads_kv, const char* what) {
  if (heads_kv < 1) throw_bad_input(std::string(what) + ": heads_kv must be >= 1 (got " + std::to_string(heads_kv) + ")");
}

std::vector<int> host_bits(const int* bits, int heads_kv, const char* what, const char* name, bool zeros_mean_choose) {
  if (!bits)
    throw_bad_input(std::string(what) + "." + name + " is NULL; pass a host int array of heads_kv bit widths (2 or 4" +
                    (zeros_mean_choose ? ", or all 0 to have them chosen)" : ")"));
  std::vector<int> v(bits, bits + heads_kv);
  bool all_zero = true;
  for (int b : v) all_zero = all_zero && b == 0;
  if (zeros_mean_choose && all_zero) v.clear();
  return v;
}

std::vector<float> host_scales(const float* scales, int heads_kv) {
  return scales ? std::vector<float>(scales, scales + heads_kv) : std::vector<float>{};
}

}  // namespace

FlashQCacheView flashq_view_of(const qattn_flashq_cache& c, int heads_kv, const char* what, bool zeros_mean_choose) {
  require_heads(heads_kv, what);
  FlashQCacheView v;
  v.k_blocks = c.k_blocks;
  v.v_blocks = c.v_blocks;
  v.k_page_stride = c.k_page_stride;
  v.v_page_stride = c.v_page_stride;
  v.max_blocks = c.max_blocks;
  v.block_table = c.block_table;
  v.table_stride = c.table_stride;
  v.heads = c.heads;
  v.bits.k_bits = host_bits(c.k_bits, heads_kv, what, "k_bits", zeros_mean_choose);
  v.bits.v_bits = host_bits(c.v_bits, heads_kv, what, "v_bits", zeros_mean_choose);
  v.k_buffer = c.k_buffer;
  v.v_buffer = c.v_buffer;
  v.buffer_page_stride = c.buffer_page_stride;
  v.buffer_head_stride = c.buffer_head_stride;
  v.compressed_lens = c.compressed_lens;
  v.buffer_lens = c.buffer_lens;
  v.k_scale8 = c.k_scale8;
  v.v_scale8 = c.v_scale8;
  return v;
}

}  // namespace qattn::capi

using namespace qattn::capi;

extern "C" {

qattn_status qattn_flashq_page_bytes(int d, int heads_kv, const int* bits, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(bytes_out, "bytes_out");
    require_heads(heads_kv, "qattn_flashq_page_bytes");
    *bytes_out = bits ? qattn::flashq_layout(d, std::vector<int>(bits, bits + heads_kv)).page_bytes
                      : qattn::flashq_layout(d, std::vector<int>(static_cast<size_t>(heads_kv), 4)).page_bytes;
  });
}

qattn_status qattn_flashq_buffer_bytes(int d, int batch, int heads_kv, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(bytes_out, "bytes_out");
    require_heads(heads_kv, "qattn_flashq_buffer_bytes");
    if (batch < 1) qattn::throw_bad_input("qattn_flashq_buffer_bytes: batch must be >= 1 (got " + std::to_string(batch) + ")");
    qattn::flashq_layout(d, {4});   // d in {64, 128, 256}, else bad_input saying so
    *bytes_out = qattn::flashq_buffer_bytes(d, batch, heads_kv);
  });
}

qattn_status qattn_flashq_prefill_args_init(qattn_flashq_prefill_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_prefill_args(), kPrefillFirstSize, "args"); });
}

qattn_status qattn_flashq_append_args_init(qattn_flashq_append_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_append_args(), kAppendFirstSize, "args"); });
}

qattn_status qattn_flashq_prefill(qattn_runtime* runtime, const qattn_flashq_prefill_args* args, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    const qattn_flashq_prefill_args a = read_versioned(args, default_prefill_args(), kPrefillFirstSize, "args");
    require_arg(a.cache, "args.cache");
    qattn::FlashQPrefillCall c;
    c.spec = spec_of(a.spec, "args.spec");
    c.batch = a.batch, c.heads_kv = a.heads_kv, c.n = a.n;
    c.k = a.k, c.v = a.v;
    c.sb = a.sb, c.sh = a.sh, c.ss = a.ss;
    if (a.lens) {
      if (a.batch < 1) qattn::throw_bad_input("qattn_flashq_prefill: batch must be >= 1 (got " + std::to_string(a.batch) + ")");
      c.lens.assign(a.lens, a.lens + a.batch);
    }
    c.cache = flashq_view_of(*a.cache, a.heads_kv, "args.cache", /*zeros_mean_choose=*/true);
    c.n_low = a.n_low;
    c.k_scale8 = host_scales(a.k_scale8, a.heads_kv);
    c.v_scale8 = host_scales(a.v_scale8, a.heads_kv);
    const qattn::FlashQPrefillInfo info = runtime->rt.flashq_prefill(c, stream);
    for (int h = 0; h < a.heads_kv; ++h) {
      a.cache->k_bits[h] = info.bits.k_bits[static_cast<size_t>(h)];
      a.cache->v_bits[h] = info.bits.v_bits[static_cast<size_t>(h)];
    }
    a.cache->k_page_stride = info.k_page_stride;
    a.cache->v_page_stride = info.v_page_stride;
  });
}

qattn_status qattn_flashq_append(qattn_runtime* runtime, const qattn_flashq_append_args* args, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    const qattn_flashq_append_args a = read_versioned(args, default_append_args(), kAppendFirstSize, "args");
    require_arg(a.cache, "args.cache");
    qattn::FlashQAppendCall c;
    c.spec = spec_of(a.spec, "args.spec");
    c.batch = a.batch, c.heads_kv = a.heads_kv, c.n_new = a.n_new;
    c.k = a.k, c.v = a.v;
    c.sb = a.sb, c.sh = a.sh, c.ss = a.ss;
    c.cache = flashq_view_of(*a.cache, a.heads_kv, "args.cache");
    runtime->rt.flashq_append(c, stream);
  });
}

}  // extern "C"
