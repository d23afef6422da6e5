// The C API's decode half (include/qattn/qattn.h, "Decode over a KV cache"): the C structs translated
// into DecodeCall / AppendKvCall, the KV cache sizes. The C++ calls validate the calls themselves; what
// is checked here is what this layer reads (the structs, host arrays and strings) before it gets there.
#include <cstddef>
#include <memory>
#include <string>

#include "qattn/decode.hpp"
#include "runtime/api/c_api_decode_structs.hpp"
#include "runtime/calls/kv_cache_view.hpp"

namespace qattn::capi {
namespace {

// The first versions of the argument structs: a caller built against them passes this size, and the
// fields after it (qattn_append_args: slot_mapping, num_slots) keep their defaults.
constexpr size_t kAppendFirstSize = offsetof(qattn_append_args, start) + sizeof(const int*);
constexpr size_t kDecodeFirstSize = offsetof(qattn_decode_args, tiling) + sizeof(const char*);
constexpr size_t kCachePrefillFirstSize = sizeof(qattn_cache_prefill_args);

qattn_cache_prefill_args default_cache_prefill_args() {
  qattn_cache_prefill_args a{};
  a.struct_size = sizeof a;
  return a;
}

qattn_append_args default_append_args() {
  qattn_append_args a{};
  a.struct_size = sizeof a;
  a.batch = a.heads_kv = a.n_new = 1;
  return a;
}

qattn_decode_args default_decode_args() {
  qattn_decode_args a{};
  a.struct_size = sizeof a;
  const UnifiedMax um;
  a.unified_max = qattn_unified_max{um.phi, um.lo, um.hi, um.enabled ? 1 : 0};
  return a;
}

// A decode spec whose cache is made of rows (every format but flashq).
Spec row_format_spec(const char* text, const char* what) {
  const Spec spec = spec_of(text, "spec");
  if (spec.phase != Phase::decode || spec.qk.fmt == Fmt::flashq)
    throw_bad_input(std::string(what) + " takes a decode spec of a row format (fp16, bf16, int8:per_token, int4:per_token, "
                    "int4:per_group, fp8e4m3:per_head), got '" + text + "'; flashq caches have their own sizes");
  return spec;
}

DecodeCall decode_call_of(const qattn_decode_args* given) {
  const qattn_decode_args a = read_versioned(given, default_decode_args(), kDecodeFirstSize, "args");
  DecodeCall c;
  c.spec = spec_of(a.spec, "args.spec");
  if (c.spec.phase != Phase::decode)
    throw_bad_input(std::string("qattn_decode takes a decode spec ('decode qk=... pv=... out=... d=...'), got '") + a.spec + "'");
  c.problem = problem_of(a.shape);
  c.q = a.q.data;
  c.q_sb = a.q.sb, c.q_sh = a.q.sh, c.q_ss = a.q.ss;
  c.o = a.o.data;
  c.o_sb = a.o.sb, c.o_sh = a.o.sh, c.o_ss = a.o.ss;
  c.cache = kv_view_of(a.cache);
  c.cache.k_mean = const_cast<float*>(a.k_mean);   // read only by decode
  c.kv_lens = a.kv_lens;
  if (c.spec.qk.fmt == Fmt::flashq) {
    if (!a.flashq) throw_bad_input("a flashq decode spec needs args.flashq, a host pointer to a qattn_flashq_cache");
    c.flashq = flashq_view_of(*a.flashq, a.shape.heads_kv, "args.flashq");
  }
  c.softmax_scale = a.softmax_scale;
  c.lse = a.lse;
  c.splits = a.splits;
  if (a.tiling) c.tiling = parse_tiling(a.tiling);
  c.unified_max = UnifiedMax{a.unified_max.phi, a.unified_max.lo, a.unified_max.hi, a.unified_max.enabled != 0};
  c.row_flags = a.row_flags;
  return c;
}

// The device pointers of `given` (a decode plan's run): no spec text is parsed, no host array read.
DecodeRun decode_run_of(const qattn_decode_args* given, void* workspace) {
  const qattn_decode_args a = read_versioned(given, default_decode_args(), kDecodeFirstSize, "args");
  DecodeRun r;
  r.q = a.q.data;
  r.o = a.o.data;
  r.lse = a.lse;
  KvCacheView cache = kv_view_of(a.cache);
  cache.k_mean = const_cast<float*>(a.k_mean);
  rt::take_cache_pointers(r, cache);
  r.kv_lens = a.kv_lens;
  if (const qattn_flashq_cache* f = a.flashq) {
    r.block_table = f->block_table;
    r.k_blocks = f->k_blocks;
    r.v_blocks = f->v_blocks;
    r.k_buffer = f->k_buffer;
    r.v_buffer = f->v_buffer;
    r.flashq_heads = f->heads;
    r.compressed_lens = f->compressed_lens;
    r.buffer_lens = f->buffer_lens;
  }
  r.row_flags = a.row_flags;
  r.softmax_scale = a.softmax_scale;
  r.workspace = workspace;
  return r;
}

// The call of a qattn_append_args (its spec parsed, its pointers taken as they are).
AppendKvCall append_call_of(const qattn_append_args* given) {
  const qattn_append_args a = read_versioned(given, default_append_args(), kAppendFirstSize, "args");
  AppendKvCall c;
  c.spec = spec_of(a.spec, "args.spec");
  c.batch = a.batch, c.heads_kv = a.heads_kv, c.n_new = a.n_new;
  c.k = a.k, c.v = a.v;
  c.sb = a.sb, c.sh = a.sh, c.ss = a.ss;
  c.cache = kv_view_of(a.cache);
  c.start = a.start;
  static_assert(sizeof(long long) == sizeof(int64_t), "slot_mapping is read as long long");
  c.slot_mapping = reinterpret_cast<const long long*>(a.slot_mapping);
  c.num_slots = a.num_slots;
  c.cache.k_mean = a.k_mean;
  c.init_k_mean = a.init_k_mean != 0;
  return c;
}

// The cache of a qattn_cache_prefill_args: its pointers (read only by the gather) and lengths.
KvSource source_of(const qattn_cache_prefill_args& a, bool parse_spec) {
  KvSource src;
  if (parse_spec) src.spec = spec_of(a.cache_spec, "cache_spec");
  src.view = kv_view_of(a.cache);
  src.view.k_mean = const_cast<float*>(a.k_mean);
  src.kv_lens = a.kv_lens;
  return src;
}

// The call of a qattn_cache_prefill_args over `src` (which must outlive it).
AttentionCall cache_call_of(const qattn_cache_prefill_args& a, const KvSource& src) {
  AttentionCall c;
  c.spec = spec_of(a.spec, "spec");
  c.problem = problem_of(a.shape);
  c.q = view_of(a.q);
  c.o = view_of(a.o);
  c.cu_seqlens_q = a.cu_seqlens_q;
  c.kv_cache = &src;
  c.softmax_scale = a.softmax_scale;
  c.lse = a.lse;
  return c;
}

void cache_prefill(qattn_runtime* runtime, const qattn_cache_prefill_args& a, void* stream) {
  require_arg(runtime, "runtime");
  require_arg(a.cu_seqlens_q, "cu_seqlens_q");
  require_arg(a.kv_lens, "kv_lens");
  const KvSource src = source_of(a, true);
  runtime->rt.attention(cache_call_of(a, src), stream);
}

}  // namespace

KvCacheView kv_view_of(const qattn_kv_cache& c) {
  KvCacheView v;
  v.k = c.k;
  v.v = c.v;
  v.page_stride = c.page_stride;
  v.head_stride = c.head_stride;
  v.capacity = c.capacity;
  v.page_size = c.page_size;
  v.block_table = c.block_table;
  v.table_stride = c.table_stride;
  v.k_head_scale = c.k_head_scale;
  v.v_head_scale = c.v_head_scale;
  return v;
}

}  // namespace qattn::capi

using namespace qattn::capi;

extern "C" {

qattn_status qattn_kv_row_bytes(const char* spec, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(bytes_out, "bytes_out");
    *bytes_out = qattn::kv_row_bytes(row_format_spec(spec, "qattn_kv_row_bytes"));
  });
}

qattn_status qattn_kv_cache_bytes(const char* spec, int batch, int heads_kv, int capacity, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(bytes_out, "bytes_out");
    const qattn::Spec s = row_format_spec(spec, "qattn_kv_cache_bytes");
    if (batch < 1 || heads_kv < 1 || capacity < 1)
      qattn::throw_bad_input("qattn_kv_cache_bytes: batch, heads_kv and capacity must be >= 1 (got " + std::to_string(batch) +
                             ", " + std::to_string(heads_kv) + ", " + std::to_string(capacity) + ")");
    *bytes_out = qattn::kv_cache_bytes(s, batch, heads_kv, capacity);
  });
}

qattn_status qattn_append_args_init(qattn_append_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_append_args(), kAppendFirstSize, "args"); });
}

qattn_status qattn_decode_args_init(qattn_decode_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_decode_args(), kDecodeFirstSize, "args"); });
}

qattn_status qattn_cache_prefill_args_init(qattn_cache_prefill_args* args, size_t struct_size) {
  return guarded([&] { init_versioned(args, struct_size, default_cache_prefill_args(), kCachePrefillFirstSize, "args"); });
}

qattn_status qattn_cache_prefill(qattn_runtime* runtime, const qattn_cache_prefill_args* args, void* stream) {
  return guarded([&] {
    cache_prefill(runtime, read_versioned(args, default_cache_prefill_args(), kCachePrefillFirstSize, "args"), stream);
  });
}

qattn_status qattn_cache_prefill_plan_create(qattn_runtime* runtime, const qattn_cache_prefill_args* args, unsigned flags,
                                            qattn_attention_plan** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    require_workspace_flag_only(flags, "qattn_cache_prefill_plan_create");
    const qattn_cache_prefill_args a = read_versioned(args, default_cache_prefill_args(), kCachePrefillFirstSize, "args");
    // Device pointers are not read at plan time: stand-ins where the checks need one.
    qattn_cache_prefill_args shape = a;
    alignas(256) static const int stand_in[64] = {};
    void* const aligned = const_cast<int*>(stand_in);
    shape.cu_seqlens_q = shape.kv_lens = stand_in;
    shape.cache.k = shape.cache.v = aligned;
    shape.cache.block_table = stand_in;
    shape.cache.k_head_scale = shape.cache.v_head_scale = reinterpret_cast<const float*>(stand_in);
    const qattn::KvSource src = source_of(shape, true);
    auto p = std::make_unique<qattn_attention_plan>();
    p->runtime = runtime;
    p->plan = runtime->rt.plan_attention(cache_call_of(shape, src), (flags & QATTN_PLAN_CALLER_WORKSPACE) == 0);
    *out = p.release();
  });
}

qattn_status qattn_cache_prefill_plan_run(qattn_runtime* runtime, const qattn_attention_plan* plan,
                                         const qattn_cache_prefill_args* args, void* workspace, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(plan, "plan");
    if (plan->runtime != runtime)
      qattn::throw_bad_input("qattn_cache_prefill_plan_run: the plan was made by another runtime; run it with that one");
    const qattn_cache_prefill_args a = read_versioned(args, default_cache_prefill_args(), kCachePrefillFirstSize, "args");
    const qattn::KvSource src = source_of(a, false);
    qattn::AttentionRun r;
    r.q = a.q.data, r.o = a.o.data, r.lse = a.lse;
    r.cu_seqlens_q = a.cu_seqlens_q;
    r.softmax_scale = a.softmax_scale;
    r.workspace = workspace;
    r.kv_cache = &src;
    runtime->rt.run(*plan->plan, r, stream);
  });
}

qattn_status qattn_attention_over_cache(qattn_runtime* runtime, const char* spec, qattn_shape shape, qattn_tensor q,
                                        qattn_tensor o, const int* cu_seqlens_q, const char* cache_spec,
                                        const qattn_kv_cache* cache, const int* kv_lens, float softmax_scale, float* lse,
                                        void* stream) {
  return guarded([&] {
    require_arg(cache, "cache");
    qattn_cache_prefill_args a = default_cache_prefill_args();
    a.spec = spec;
    a.cache_spec = cache_spec;
    a.shape = shape;
    a.q = q;
    a.o = o;
    a.cu_seqlens_q = cu_seqlens_q;
    a.cache = *cache;
    a.kv_lens = kv_lens;
    a.softmax_scale = softmax_scale;
    a.lse = lse;
    cache_prefill(runtime, a, stream);
  });
}

qattn_status qattn_append_kv(qattn_runtime* runtime, const qattn_append_args* args, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    runtime->rt.append_kv(append_call_of(args), stream);
  });
}

qattn_status qattn_append_plan_create(qattn_runtime* runtime, const qattn_append_args* args, qattn_append_plan** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    auto p = std::make_unique<qattn_append_plan>();
    p->runtime = runtime;
    p->plan = runtime->rt.plan_append(append_call_of(args));
    *out = p.release();
  });
}

qattn_status qattn_append_plan_run(qattn_runtime* runtime, const qattn_append_plan* plan, const qattn_append_args* args,
                                   void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(plan, "plan");
    if (plan->runtime != runtime)
      qattn::throw_bad_input("qattn_append_plan_run: the plan was made by another runtime; run it with that one");
    const qattn_append_args a = read_versioned(args, default_append_args(), kAppendFirstSize, "args");
    qattn::AppendRun r;   // pointers only: no spec text is parsed
    r.k = a.k, r.v = a.v;
    qattn::KvCacheView cache = kv_view_of(a.cache);
    cache.k_mean = a.k_mean;
    qattn::rt::take_cache_pointers(r, cache);
    r.start = a.start;
    r.slot_mapping = reinterpret_cast<const long long*>(a.slot_mapping);
    runtime->rt.run(*plan->plan, r, stream);
  });
}

const char* qattn_append_plan_kernel_name(const qattn_append_plan* plan) {
  return plan ? plan->plan->kernel_name().c_str() : "";
}

void qattn_append_plan_destroy(qattn_append_plan* plan) { delete plan; }


qattn_status qattn_decode(qattn_runtime* runtime, const qattn_decode_args* args, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    runtime->rt.decode(decode_call_of(args), stream);
  });
}

qattn_status qattn_decode_plan_create(qattn_runtime* runtime, const qattn_decode_args* args, unsigned flags,
                                      qattn_decode_plan** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    require_workspace_flag_only(flags, "qattn_decode_plan_create");
    auto p = std::make_unique<qattn_decode_plan>();
    p->runtime = runtime;
    p->plan = runtime->rt.plan_decode(decode_call_of(args), (flags & QATTN_PLAN_CALLER_WORKSPACE) == 0);
    *out = p.release();
  });
}

qattn_status qattn_decode_plan_workspace_bytes(const qattn_decode_plan* plan, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(plan, "plan");
    require_arg(bytes_out, "bytes_out");
    *bytes_out = static_cast<int64_t>(plan->plan->workspace_bytes());
  });
}

const char* qattn_decode_plan_kernel_name(const qattn_decode_plan* plan) { return plan ? plan->plan->kernel_name().c_str() : ""; }

int qattn_decode_plan_splits(const qattn_decode_plan* plan) { return plan ? plan->plan->splits() : 0; }

qattn_status qattn_decode_plan_run(qattn_runtime* runtime, const qattn_decode_plan* plan, const qattn_decode_args* args,
                                   void* workspace, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(plan, "plan");
    if (plan->runtime != runtime)
      qattn::throw_bad_input("qattn_decode_plan_run: the plan was made by another runtime; run it with that one");
    runtime->rt.run(*plan->plan, decode_run_of(args, workspace), stream);
  });
}

void qattn_decode_plan_destroy(qattn_decode_plan* plan) { delete plan; }

qattn_status qattn_decode_route(qattn_runtime* runtime, const qattn_decode_args* args, char* name_out, size_t name_len,
                                char* flow_out, size_t flow_len, int* splits_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    const qattn::Runtime::DecodeRouteInfo r = runtime->rt.decode_route(decode_call_of(args));
    copy_out(r.kernel_name, name_out, name_len);
    copy_out(qattn::to_string(r.flow), flow_out, flow_len);
    if (splits_out) *splits_out = r.splits;
  });
}

qattn_status qattn_decode_fallback_rows(qattn_runtime* runtime, void* stream, int64_t* rows_out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(rows_out, "rows_out");
    *rows_out = runtime->rt.decode_fallback_rows(stream);
  });
}

}  // extern "C"
