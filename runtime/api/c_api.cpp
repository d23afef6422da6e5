// The C API (include/qattn/qattn.h) over qattn::Runtime: exceptions become status codes plus a
// thread-local one-line message.
#include "qattn/qattn.h"

#include <cstddef>
#include <cstring>
#include <string>

#include "generator/search_space.hpp"
#include "runtime/api/c_api_internal.hpp"

namespace qattn::capi {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

void check_struct_size(const void* p, size_t struct_size, size_t first_size, size_t known_size, const char* what) {
  if (struct_size < first_size)
    throw_bad_input(std::string(what) + ": struct_size " + std::to_string(struct_size) + " is below the first version's " +
                    std::to_string(first_size) + " bytes; set it with the matching _init call or to sizeof of the struct");
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = known_size; i < struct_size; ++i)
    if (bytes[i] != 0)
      throw_bad_input(std::string(what) + ": struct_size " + std::to_string(struct_size) + " has fields this library (" +
                      std::to_string(known_size) + " bytes) does not know set to non-default values; accepted: zero there, or a newer libqattn");
}

Problem problem_of(const qattn_shape& s) { return Problem{s.batch, s.heads_q, s.heads_kv, s.q_len, s.kv_len}; }

TensorView view_of(const qattn_tensor& t) { return TensorView{t.data, t.sb, t.sh, t.ss}; }

Spec spec_of(const char* spec, const char* what) {
  require_arg(spec, what);
  return parse_spec(spec);
}

}  // namespace qattn::capi

namespace {

using namespace qattn::capi;

// The first (and so far only) version of qattn_options ends with shipped_cache_path.
constexpr size_t kOptionsFirstSize = offsetof(qattn_options, shipped_cache_path) + sizeof(const char*);

qattn_options default_options_v() {
  qattn_options o{};
  o.struct_size = sizeof(qattn_options);
  o.use_cache = 1;
  o.tune = 1;
  return o;
}

qattn::RuntimeOptions runtime_options_of(const qattn_options& o) {
  qattn::RuntimeOptions ro;
  if (o.cache_path) ro.cache_path = o.cache_path;
  ro.use_cache = o.use_cache != 0;
  ro.read_only = o.read_only != 0;
  ro.tune = o.tune != 0;
  ro.device = o.device;
  if (o.shipped_cache_path) ro.shipped_cache_path = o.shipped_cache_path;
  return ro;
}

qattn::AttentionCall call_of(const char* spec, qattn_shape shape, qattn_tensor q, qattn_tensor k, qattn_tensor v) {
  qattn::AttentionCall c;
  c.spec = spec_of(spec, "spec");
  c.problem = problem_of(shape);
  c.q = view_of(q);
  c.k = view_of(k);
  c.v = view_of(v);
  return c;
}

}  // namespace

extern "C" {

const char* qattn_version(void) { return QATTN_VERSION; }
const char* qattn_last_error(void) { return last_error().c_str(); }

qattn_runtime_options qattn_default_options(void) {
  qattn_runtime_options o;
  o.cache_path = nullptr;
  o.use_cache = 1;
  o.read_only = 0;
  o.tune = 1;
  o.device = 0;
  return o;
}

qattn_status qattn_options_init(qattn_options* options, size_t struct_size) {
  return guarded([&] { init_versioned(options, struct_size, default_options_v(), kOptionsFirstSize, "options"); });
}

qattn_status qattn_runtime_open(const qattn_options* options, qattn_runtime** out) {
  return guarded([&] {
    require_arg(out, "out");
    *out = nullptr;
    const qattn_options o = options ? read_versioned(options, default_options_v(), kOptionsFirstSize, "options")
                                    : default_options_v();
    *out = new qattn_runtime(runtime_options_of(o));
  });
}

qattn_status qattn_runtime_create(const qattn_runtime_options* options, qattn_runtime** out) {
  return guarded([&] {
    require_arg(out, "out");
    *out = nullptr;
    const qattn_runtime_options v1 = options ? *options : qattn_default_options();
    qattn_options o = default_options_v();
    o.cache_path = v1.cache_path;
    o.use_cache = v1.use_cache;
    o.read_only = v1.read_only;
    o.tune = v1.tune;
    o.device = v1.device;
    *out = new qattn_runtime(runtime_options_of(o));
  });
}

void qattn_runtime_destroy(qattn_runtime* runtime) { delete runtime; }

qattn_status qattn_cache_status(qattn_runtime* runtime, char* text_out, size_t text_len) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    copy_out(runtime->rt.cache_status(), text_out, text_len);
  });
}

qattn_status qattn_compile(qattn_runtime* runtime, const char* spec, const char* tiling, char* name_out,
                           size_t name_len) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(spec, "spec");
    const qattn::Spec s = qattn::parse_spec(spec);
    if (s.arch == qattn::Arch::unset)
      qattn::throw_bad_input("compile needs arch= in the spec (sm_80, sm_86, sm_89, sm_90, sm_90a)");
    const qattn::Tiling t = tiling ? qattn::parse_tiling(tiling) : qattn::default_tiling(s, qattn::default_limits(s.arch));
    copy_out(runtime->rt.compile(s, t).kernel_name, name_out, name_len);
  });
}

qattn_status qattn_tune(qattn_runtime* runtime, const char* spec, qattn_shape shape, char* name_out, size_t name_len,
                        double* time_us) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(spec, "spec");
    const qattn::TuningResult r = runtime->rt.tune(qattn::parse_spec(spec), problem_of(shape));
    copy_out(r.winner_name, name_out, name_len);
    if (time_us) *time_us = r.time_us;
  });
}

qattn_status qattn_attention(qattn_runtime* runtime, const char* spec, qattn_shape shape, qattn_tensor q,
                             qattn_tensor k, qattn_tensor v, qattn_tensor o, float softmax_scale, float* lse,
                             void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    qattn::AttentionCall c = call_of(spec, shape, q, k, v);
    c.o = view_of(o);
    c.softmax_scale = softmax_scale;
    c.lse = lse;
    runtime->rt.attention(c, stream);
  });
}

qattn_status qattn_attention_varlen(qattn_runtime* runtime, const char* spec, qattn_shape shape, qattn_tensor q,
                                    qattn_tensor k, qattn_tensor v, qattn_tensor o, const int* cu_seqlens_q,
                                    const int* cu_seqlens_kv, float softmax_scale, float* lse, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(cu_seqlens_q, "cu_seqlens_q");
    require_arg(cu_seqlens_kv, "cu_seqlens_kv");
    qattn::AttentionCall c = call_of(spec, shape, q, k, v);
    c.o = view_of(o);
    c.cu_seqlens_q = cu_seqlens_q;
    c.cu_seqlens_kv = cu_seqlens_kv;
    c.softmax_scale = softmax_scale;
    c.lse = lse;
    runtime->rt.attention(c, stream);
  });
}

qattn_status qattn_prepare(qattn_runtime* runtime, const char* spec, qattn_shape shape, qattn_tensor q,
                           qattn_tensor k, qattn_tensor v, void* stream, qattn_prepared** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    auto p = std::make_unique<qattn_prepared>();
    p->prepared = runtime->rt.prepare(call_of(spec, shape, q, k, v), stream);
    *out = p.release();
  });
}

qattn_status qattn_run_prepared(qattn_runtime* runtime, qattn_prepared* prepared, qattn_tensor o, float softmax_scale,
                                float* lse, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(prepared, "prepared");
    runtime->rt.run(*prepared->prepared, view_of(o), softmax_scale, lse, stream);
  });
}

const char* qattn_prepared_kernel_name(const qattn_prepared* prepared) {
  return prepared ? prepared->prepared->kernel().name().c_str() : "";
}

void qattn_prepared_destroy(qattn_prepared* prepared) { delete prepared; }

qattn_status qattn_attention_plan_create(qattn_runtime* runtime, const char* spec, qattn_shape shape, qattn_tensor q,
                                         qattn_tensor k, qattn_tensor v, qattn_tensor o, unsigned flags,
                                         qattn_attention_plan** out) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(out, "out");
    *out = nullptr;
    constexpr unsigned known = QATTN_PLAN_VARLEN | QATTN_PLAN_CALLER_WORKSPACE;
    if (flags & ~known)
      qattn::throw_bad_input("qattn_attention_plan_create: unknown flags " + std::to_string(flags & ~known) +
                             "; accepted: QATTN_PLAN_VARLEN (1), QATTN_PLAN_CALLER_WORKSPACE (2)");
    qattn::AttentionCall c = call_of(spec, shape, q, k, v);
    c.o = view_of(o);
    if (flags & QATTN_PLAN_VARLEN) c.spec.varlen = true;
    auto p = std::make_unique<qattn_attention_plan>();
    p->runtime = runtime;
    p->plan = runtime->rt.plan_attention(c, (flags & QATTN_PLAN_CALLER_WORKSPACE) == 0);
    *out = p.release();
  });
}

qattn_status qattn_attention_plan_workspace_bytes(const qattn_attention_plan* plan, int64_t* bytes_out) {
  return guarded([&] {
    require_arg(plan, "plan");
    require_arg(bytes_out, "bytes_out");
    *bytes_out = static_cast<int64_t>(plan->plan->workspace_bytes());
  });
}

const char* qattn_attention_plan_kernel_name(const qattn_attention_plan* plan) {
  return plan ? plan->plan->kernel().name().c_str() : "";
}

qattn_status qattn_attention_plan_run(qattn_runtime* runtime, const qattn_attention_plan* plan, const void* q,
                                      const void* k, const void* v, void* o, float* lse, const int* cu_seqlens_q,
                                      const int* cu_seqlens_kv, float softmax_scale, void* workspace, void* stream) {
  return guarded([&] {
    require_arg(runtime, "runtime");
    require_arg(plan, "plan");
    if (plan->runtime != runtime)
      qattn::throw_bad_input("qattn_attention_plan_run: the plan was made by another runtime; run it with that one");
    qattn::AttentionRun r;
    r.q = q, r.k = k, r.v = v, r.o = o, r.lse = lse;
    r.cu_seqlens_q = cu_seqlens_q, r.cu_seqlens_kv = cu_seqlens_kv;
    r.softmax_scale = softmax_scale;
    r.workspace = workspace;
    runtime->rt.run(*plan->plan, r, stream);
  });
}

void qattn_attention_plan_destroy(qattn_attention_plan* plan) { delete plan; }

}  // extern "C"
