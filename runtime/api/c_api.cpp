// The C API (include/qattn/qattn.h) over qattn::Runtime: exceptions become status codes plus a
// thread-local one-line message.
#include "qattn/qattn.h"

#include <cstring>
#include <string>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"

struct qattn_runtime {
  explicit qattn_runtime(qattn::RuntimeOptions o) : rt(std::move(o)) {}
  qattn::Runtime rt;
};

struct qattn_prepared {
  std::unique_ptr<qattn::PreparedAttention> prepared;
};

namespace {

thread_local std::string g_last_error;

template <class Body>
qattn_status guarded(Body&& body) {
  try {
    body();
    g_last_error.clear();
    return QATTN_OK;
  } catch (const qattn::Error& e) {
    g_last_error = e.what();
    return static_cast<qattn_status>(e.kind());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return QATTN_ERROR;
  } catch (...) {
    g_last_error = "unknown error";
    return QATTN_ERROR;
  }
}

void require_arg(const void* p, const char* what) {
  if (!p) qattn::throw_bad_input(std::string(what) + " is NULL");
}

void copy_out(const std::string& s, char* out, size_t len) {
  if (!out || len == 0) return;
  const size_t n = std::min(len - 1, s.size());
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

qattn::Problem problem_of(const qattn_shape& s) {
  return qattn::Problem{s.batch, s.heads_q, s.heads_kv, s.q_len, s.kv_len};
}

qattn::TensorView view_of(const qattn_tensor& t) { return qattn::TensorView{t.data, t.sb, t.sh, t.ss}; }

qattn::AttentionCall call_of(const char* spec, qattn_shape shape, qattn_tensor q, qattn_tensor k, qattn_tensor v) {
  require_arg(spec, "spec");
  qattn::AttentionCall c;
  c.spec = qattn::parse_spec(spec);
  c.problem = problem_of(shape);
  c.q = view_of(q);
  c.k = view_of(k);
  c.v = view_of(v);
  return c;
}

}  // namespace

extern "C" {

const char* qattn_version(void) { return QATTN_VERSION; }
const char* qattn_last_error(void) { return g_last_error.c_str(); }

qattn_runtime_options qattn_default_options(void) {
  qattn_runtime_options o;
  o.cache_path = nullptr;
  o.use_cache = 1;
  o.read_only = 0;
  o.tune = 1;
  o.device = 0;
  return o;
}

qattn_status qattn_runtime_create(const qattn_runtime_options* options, qattn_runtime** out) {
  return guarded([&] {
    require_arg(out, "out");
    *out = nullptr;
    const qattn_runtime_options o = options ? *options : qattn_default_options();
    qattn::RuntimeOptions ro;
    if (o.cache_path) ro.cache_path = o.cache_path;
    ro.use_cache = o.use_cache != 0;
    ro.read_only = o.read_only != 0;
    ro.tune = o.tune != 0;
    ro.device = o.device;
    *out = new qattn_runtime(std::move(ro));
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

}  // extern "C"
