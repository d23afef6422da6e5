#include "runtime/calls/attention_stage.hpp"

#include <algorithm>
#include <cstdint>

#include "qattn/error.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace rt {

bool one_pass_fits(const Spec& spec, const Problem& p, int sm_count) {
  const long long tiles = 1LL * p.batch * p.heads_kv * ((p.kv_len + quant::kRowTileTokens - 1) / quant::kRowTileTokens);
  return spec.quantized() && sm_count > 0 && tiles <= sm_count;
}

}  // namespace rt

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr size_t kMergeSlackBytes = 4096;   // zeroed bytes between two scratch ranges a merged memset may cover

}  // namespace

rt::AttentionStage Runtime::Impl::stage_attention(const Spec& spec, const Problem& p, const Tiling& tiling,
                                                  bool lse_fix) {
  rt::AttentionStage st;
  const int d = spec.head_dim;
  const int sms = device().sm_count;
  const bool one_pass = experiment.quant_one_pass || rt::one_pass_fits(spec, p, sms);
  const int resident = one_pass ? quant::kOnePassMinBlocks * sms : 0;
  st.slots = rt::quant_slots(spec, p, tiling.int4_mma, resident, options.k_mean_sample_tokens, tiling.q_fused, tiling.tma);
  // Codes, scales and means first, then every operand's scratch side by side, so that the scratch that
  // must start zeroed can be cleared by one memset.
  size_t bytes = 0;
  for (rt::QuantSlot& s : st.slots) {
    if (!s.active) continue;
    const long long rows = static_cast<long long>(s.problem.batch) * s.problem.heads;
    s.codes = bytes;
    s.row_bytes = s.request.pack4 ? d / 2 : d;   // packed int4: two codes per byte
    bytes = align_up(bytes + static_cast<size_t>(rows) * s.problem.seq_pad * s.row_bytes);
    s.scales = bytes;
    bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(s.plan.scale_floats));
    s.mean = bytes;
    bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(s.plan.mean_floats));
  }
  st.lse_fix = lse_fix && st.slots[1].request.smooth;
  st.dot = bytes;
  if (st.lse_fix) bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(p.batch) * p.heads_q * p.q_len);
  size_t zero_first = SIZE_MAX, zero_end = 0, zero_sum = 0;
  for (rt::QuantSlot& s : st.slots) {
    if (!s.active) continue;
    s.scratch = bytes;   // each operand its own: V's passes may run beside K's (concurrent passes)
    bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(s.plan.scratch_floats));
    // Every pass that zeroes scratch zeroes a prefix that no earlier pass of its operand writes
    // (generator/quant_plan.hpp: [0] or the one-pass sync words), so zeroing it before the first is the same.
    for (const gen::QuantLaunch& l : s.plan.launches)
      if (l.zero_scratch_floats > 0) {
        const size_t n = sizeof(float) * static_cast<size_t>(l.zero_scratch_floats);
        zero_first = std::min(zero_first, s.scratch);
        zero_end = std::max(zero_end, s.scratch + n);
        zero_sum += n;
      }
  }
  st.bytes = bytes;
  st.lane = rt::pass_lanes(st.slots, experiment.concurrent_passes &&
                                         1LL * p.batch * p.heads_kv * p.kv_len >= rt::kForkMinRows);
  st.fork = st.lane[2] >= 0;
  st.sides = st.lane[0] == 1 ? 2 : 1;   // pass_lanes: V on side stream 0, Q on 1
  if (!st.fork && zero_sum > 0 && zero_end - zero_first <= zero_sum + kMergeSlackBytes) {
    st.zero_begin = zero_first;
    st.zero_bytes = zero_end - zero_first;
  }
  for (size_t i = 0; i < 3; ++i) {
    const rt::QuantSlot& s = st.slots[i];
    if (!s.active) continue;
    for (const gen::QuantLaunch& l : s.plan.launches)
      st.passes[i].push_back(load_helper(gen::quant_pass_kernel(s.request, l),
                                         [&] { return gen::render_quant_pass(s.request, l, spec.arch); }));
  }
  if (st.lse_fix) {
    st.row_dot = load_helper(gen::lse_rowdot_kernel(spec), [&] { return gen::render_lse_rowdot(spec); });
    st.lse_add = load_helper(gen::lse_addscaled_kernel(), [&] { return gen::render_lse_addscaled(spec.arch); });
  }
  return st;
}

namespace {

TensorRef codes_ref(const rt::QuantSlot& s, char* base, int d) {
  const long long heads = s.problem.heads, seq = s.problem.seq_pad, rb = s.row_bytes;
  return s.request.transpose ? TensorRef{base + s.codes, heads * d * seq, d * seq, 1, seq}
                             : TensorRef{base + s.codes, heads * seq * rb, seq * rb, rb, 1};
}

}  // namespace

QuantParams Runtime::Impl::stage_quant_params(const rt::QuantSlot& s, const TensorRef& x, char* base, int d,
                                              const int* cu_seqlens) {
  QuantParams qp{};
  qp.x = x;
  qp.y = codes_ref(s, base, d);
  qp.scale = gen::dense_scale_ref(s.request, s.problem, reinterpret_cast<float*>(base + s.scales));
  qp.mean = s.plan.mean_floats ? reinterpret_cast<float*>(base + s.mean) : nullptr;
  qp.amax_scratch = s.plan.scratch_floats ? reinterpret_cast<float*>(base + s.scratch) : nullptr;
  qp.batch = s.problem.batch;
  qp.heads = s.problem.heads;
  qp.seq_len = s.problem.seq_len;
  qp.seq_pad = s.problem.seq_pad;
  qp.d = d;
  qp.qmax = s.request.code == Fmt::fp8e4m3 ? 448.f : static_cast<float>(s.request.qmax);   // fp8: amax / 448; int4 Q/K: 7
  qp.cu_seqlens = cu_seqlens;
  return qp;
}

std::string Runtime::Impl::stage_input_problem(const rt::AttentionStage& st, const StageInputs& in, char* base) {
  for (size_t i = 0; i < 3; ++i) {
    const rt::QuantSlot& s = st.slots[i];
    if (!s.active) continue;
    const QuantParams qp = stage_quant_params(s, in.x[i], base, in.head_dim, i == 0 ? in.cu_q : in.cu_kv);
    const std::string err = gen::quant_params_error(s.request, qp);
    if (!err.empty()) return "cannot quantize " + std::string("qkv").substr(i, 1) + ": " + err;
  }
  return "";
}

Runtime::Impl::PassFork& Runtime::Impl::stream_fork(void* stream) {
  std::lock_guard<std::mutex> lock(fork_mutex);
  auto& slot = pass_forks[stream];
  if (!slot) slot = std::make_unique<PassFork>(options.device);
  return *slot;
}

void Runtime::Impl::enqueue_stage(const rt::AttentionStage& st, const StageInputs& in, char* base, void* stream,
                                  AttentionParams& ap, LseCorrectionParams* fix, PassFork* pf) {
  const int d = in.head_dim;
  const CUstream cu_stream = static_cast<CUstream>(stream);
  if (st.zero_bytes > 0)
    rt::fill_bytes_async(reinterpret_cast<CUdeviceptr>(base + st.zero_begin), 0, st.zero_bytes, cu_stream, options.device);
  // Forking: the side streams' passes are queued first; the caller's stream then waits for them before
  // anything that reads their output.
  std::unique_lock<std::mutex> fork_lock;
  if (st.fork) {
    if (!pf) throw std::logic_error("enqueue_stage: a forking stage needs its side streams");
    fork_lock = std::unique_lock<std::mutex>(pf->mutex);   // one fork at a time records the events
    pf->forked.record(cu_stream);
    for (int l = 0; l < st.sides; ++l) pf->forked.make_wait(pf->side[l].get());
  }
  for (int i : st.fork ? std::array<int, 3>{2, 0, 1} : std::array<int, 3>{0, 1, 2}) {
    const size_t u = static_cast<size_t>(i);
    const rt::QuantSlot& s = st.slots[u];
    if (!s.active) {   // pv=fp16: V as given; _qf: Q as given
      (i == 0 ? ap.q : ap.v) = in.x[u];
      continue;
    }
    const CUstream pass_stream = st.lane[u] < 0 ? cu_stream : pf->side[st.lane[u]].get();
    const QuantParams qp = stage_quant_params(s, in.x[u], base, d, i == 0 ? in.cu_q : in.cu_kv);
    for (size_t j = 0; j < s.plan.launches.size(); ++j) {
      const gen::QuantLaunch& l = s.plan.launches[j];
      if (l.zero_scratch_floats > 0 && st.zero_bytes == 0)
        rt::fill_bytes_async(reinterpret_cast<CUdeviceptr>(qp.amax_scratch), 0,
                             sizeof(float) * static_cast<size_t>(l.zero_scratch_floats), pass_stream, options.device);
      st.passes[u][j]->launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes,
                              pass_stream, qp);
    }
    if (i == 0) { ap.q = qp.y; ap.q_scale = qp.scale; ap.q_mean = qp.mean; }   // mean: Q block means (smooth=q)
    if (i == 1) { ap.k = qp.y; ap.k_scale = qp.scale; }
    if (i == 2) { ap.v = qp.y; ap.v_scale = qp.scale; ap.v_mean = qp.mean; }   // mean: V smoothing, added back to O
  }
  if (st.fork) {   // the caller's stream goes on only when the side streams' passes are done
    for (int l = 0; l < st.sides; ++l) {
      pf->joined[l].record(pf->side[l].get());
      pf->joined[l].make_wait(cu_stream);
    }
    fork_lock.unlock();
  }
  if (st.lse_fix && fix) {
    fix->q = in.x[0];
    fix->k_mean = reinterpret_cast<const float*>(base + st.slots[1].mean);
    fix->dot = reinterpret_cast<float*>(base + st.dot);
    fix->batch = in.problem.batch;
    fix->heads_q = in.problem.heads_q;
    fix->heads_kv = in.problem.heads_kv;
    fix->q_len = in.problem.q_len;
    fix->cu_q = in.cu_q;
    st.row_dot->launch(rt::Dim3{static_cast<unsigned>((in.problem.q_len + 3) / 4), static_cast<unsigned>(in.problem.heads_q),
                                static_cast<unsigned>(in.problem.batch)},
                       rt::Dim3{128, 1, 1}, 0, cu_stream, *fix);
  }
}

void Runtime::Impl::add_lse_fix(const rt::AttentionStage& st, LseCorrectionParams fix, float* lse, float softmax_scale,
                                void* stream) {
  fix.lse = lse;
  fix.softmax_scale = softmax_scale;
  const long long rows = static_cast<long long>(fix.batch) * fix.heads_q * fix.q_len;
  st.lse_add->launch(rt::Dim3{static_cast<unsigned>((rows + 255) / 256), 1, 1}, rt::Dim3{256, 1, 1}, 0,
                     static_cast<CUstream>(stream), fix);
}

}  // namespace qattn
