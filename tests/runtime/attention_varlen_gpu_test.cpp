// Variable-length prefill (AttentionCall::cu_seqlens_q / cu_seqlens_kv, spec token varlen): a ragged
// batch packed along the token axis gives each sequence what a call on that sequence alone gives.
//  - Bit for bit where both quantize the sequence the same way (16-bit specs; token-local Q/K scales and
//    per_channel V without smoothing): the same tiling on the same codes, in every kernel form (mma.sync,
//    wgmma, _tma, _ws, fused Q).
//  - Within the single call's own error otherwise (smoothing means and per_tensor scales are statistics
//    over other token sets), against a float64 reference per sequence.
// Lengths: a single row, tails shorter than a tile and one past it, q < kv (chunked prefill over a cached
// prefix) and q > kv (causal rows that see nothing), GQA; outputs and LSE poisoned first. Then a CUDA graph
// captured on one batch replays another batch of the same bounds with the eager bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/decode/kv_layout.h"
#include "qattn/validate.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "tests/common/attention_runs.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/metrics.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;

struct Seq {
  int q_len, kv_len;
};

// Ragged lengths: 1 row; 15 / 16 / 17 around a tile edge with a longer cached prefix; q > kv (causal rows
// with no key); a few hundred rows over a longer prefix; one long sequence.
const std::vector<Seq> kRagged = {{1, 1}, {15, 40}, {16, 16}, {17, 5}, {130, 700}, {1000, 1000}};

// A ragged batch on the host (each sequence its own [1, h, len, d] bshd tensors, whose storage is the
// packed rows) and on the device (packed back to back, with the offset arrays).
struct Ragged {
  std::vector<HostTensor> q, k, v;
  std::vector<int> cu_q{0}, cu_kv{0};
  rt::DeviceBuffer dq, dk, dv, dcu_q, dcu_kv;
  int max_q = 0, max_kv = 0;
};

rt::DeviceBuffer packed_upload(const std::vector<HostTensor>& parts, Fmt io) {
  std::vector<std::uint16_t> all;
  for (const HostTensor& t : parts) {
    const std::vector<std::uint16_t> bits = test::encode(t, io);
    all.insert(all.end(), bits.begin(), bits.end());
  }
  return rt::DeviceBuffer::from(all);
}

Ragged make_ragged(const Spec& spec, int heads_kv, const std::vector<Seq>& seqs, std::uint64_t seed) {
  Ragged r;
  const int d = spec.head_dim, hq = heads_kv * spec.gqa;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::uint64_t s = seed + 10 * i;
    r.q.push_back(test::random_tensor({1, hq, seqs[i].q_len, d}, Layout::bshd, test::q_like(), s));
    r.k.push_back(test::random_tensor({1, heads_kv, seqs[i].kv_len, d}, Layout::bshd, test::k_like(), s + 1));
    r.v.push_back(test::random_tensor({1, heads_kv, seqs[i].kv_len, d}, Layout::bshd, test::v_like(), s + 2));
    for (HostTensor* t : {&r.q.back(), &r.k.back(), &r.v.back()}) test::round_to(*t, spec.out);
    r.cu_q.push_back(r.cu_q.back() + seqs[i].q_len);
    r.cu_kv.push_back(r.cu_kv.back() + seqs[i].kv_len);
    r.max_q = std::max(r.max_q, seqs[i].q_len);
    r.max_kv = std::max(r.max_kv, seqs[i].kv_len);
  }
  r.dq = packed_upload(r.q, spec.out);
  r.dk = packed_upload(r.k, spec.out);
  r.dv = packed_upload(r.v, spec.out);
  r.dcu_q = rt::DeviceBuffer::from(r.cu_q);
  r.dcu_kv = rt::DeviceBuffer::from(r.cu_kv);
  return r;
}

// The outputs of one run: O per sequence and LSE per sequence as [h][len].
struct Outputs {
  std::vector<HostTensor> o;
  std::vector<std::vector<float>> lse;
};

// The packed output buffer, poisoned, and the varlen call over the ragged batch.
struct VarlenRun {
  rt::DeviceBuffer dout, dlse;
  AttentionCall call;
};

VarlenRun varlen_call(const Spec& spec, const Ragged& r, int heads_kv) {
  const int d = spec.head_dim, hq = heads_kv * spec.gqa, total_q = r.cu_q.back();
  VarlenRun run;
  std::vector<std::uint16_t> poison(static_cast<size_t>(total_q) * hq * d);
  test::fill_nan(poison, spec.out);
  run.dout = rt::DeviceBuffer::from(poison);
  run.dlse = rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(total_q) * hq, std::nanf("")));
  AttentionCall& c = run.call;
  c.spec = spec;   // without varlen: the offsets add it
  c.spec.varlen = false;
  c.problem = Problem{static_cast<int>(r.q.size()), hq, heads_kv, r.max_q, r.max_kv};
  c.q = packed(r.dq.as<void>(), hq, d);
  c.k = packed(r.dk.as<void>(), heads_kv, d);
  c.v = packed(r.dv.as<void>(), heads_kv, d);
  c.o = packed(run.dout.as<void>(), hq, d);
  c.lse = run.dlse.as<float>();
  c.cu_seqlens_q = r.dcu_q.as<int>();
  c.cu_seqlens_kv = r.dcu_kv.as<int>();
  return run;
}

Outputs read_varlen(const VarlenRun& run, const Ragged& r, const Spec& spec) {
  Outputs out;
  const std::vector<std::uint16_t> o = run.dout.to_vector<std::uint16_t>();
  const std::vector<float> lse = run.dlse.to_vector<float>();
  const int d = spec.head_dim, hq = run.call.problem.heads_q;
  for (size_t b = 0; b < r.q.size(); ++b) {
    const int len = r.q[b].shape.seq;
    const test::Shape shape{1, hq, len, d};
    out.o.push_back(test::decode(o.data() + static_cast<size_t>(r.cu_q[b]) * hq * d, shape,
                                 test::dense_strides(shape, Layout::bshd), spec.out));
    std::vector<float> rows(static_cast<size_t>(hq) * len);
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < len; ++i) rows[static_cast<size_t>(h) * len + i] = lse[static_cast<size_t>(r.cu_q[b] + i) * hq + h];
    out.lse.push_back(rows);
  }
  return out;
}

// Each sequence alone (batch 1, its own lengths) in the tiling `form`, into poisoned outputs.
Outputs per_sequence(Runtime& runtime, const Spec& spec, const Ragged& r, int heads_kv, const Tiling& form,
                     rt::Stream& stream) {
  Outputs out;
  Spec dense = spec;
  dense.varlen = false;
  for (size_t b = 0; b < r.q.size(); ++b) {
    const Problem p{1, heads_kv * spec.gqa, heads_kv, r.q[b].shape.seq, r.k[b].shape.seq};
    test::Uploaded in = test::upload_call(dense, p, r.q[b], r.k[b], r.v[b]);
    rt::DeviceBuffer dlse = rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(p.heads_q) * p.q_len, std::nanf("")));
    in.call.lse = dlse.as<float>();
    const HostTensor like = HostTensor::zeros({1, p.heads_q, p.q_len, spec.head_dim}, Layout::bshd);
    out.o.push_back(test::run_poisoned(runtime, in.call, like, form, stream));
    out.lse.push_back(dlse.to_vector<float>());
  }
  return out;
}

// LSE values that differ (a poisoned NaN left in either counts).
size_t lse_differ(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += !(a[i] == b[i]);
  return n;
}

class VarlenAttention : public test::GpuRuntimeTest {
 protected:
  // The tiling a varlen call of `spec` at the batch's bounds launches (its launch form), and the forms
  // of the same kernel that must give the same bits (TMA, warp-specialized, persistent), where the device
  // has them.
  std::vector<Tiling> forms(const Spec& vspec, const Problem& p) {
    std::vector<Tiling> out{runtime_->launch_form(vspec, runtime_->kernel(vspec, p).tiling())};
    if (vspec.arch == Arch::sm_90a && vspec.quantized() && !vspec.smooth && (vspec.head_dim == 64 || vspec.head_dim == 128))
      for (const char* t : {"bm64_bn128_w4_s2_wg_tma_ws", "bm128_bn128_w8_s3_wg_tma_ws", "bm64_bn128_w4_s2_wg_tma_ws_ps",
                            "bm128_bn128_w8_s3_wg_tma_ws_ps", "bm64_bn128_w4_s2_wg_qf_tma"}) {
        const Tiling ws = parse_tiling(t);
        if (validate(vspec, ws, default_limits(vspec.arch))) out.push_back(ws);
      }
    return out;
  }
};

// Same quantization per sequence, so the same bits: 16-bit, token-local Q/K scales, per_channel V,
// no smoothing; GQA, causal, d 64 / 96 / 128 / 256, int8 / fp8 / fp16 P·V, int4 Q·K.
TEST_F(VarlenAttention, EachSequenceHasTheBitsOfItsOwnCall) {
  const char* specs[] = {
      "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
      "prefill qk=bf16 pv=bf16 out=bf16 d=64",
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal",
      "prefill qk=int8:per_thread pv=fp16 out=fp16 d=64 causal",
      "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=96 causal gqa=2",
      "prefill qk=int4:per_token pv=int8:per_channel out=fp16 d=128 causal",
      "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=256",
      "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=64 causal",
  };
  for (const char* text : specs) {
    Spec spec = runtime_->resolve(parse_spec(text));
    spec.varlen = true;
    const int heads_kv = 2;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const Ragged r = make_ragged(spec, heads_kv, kRagged, seed);
    VarlenRun run = varlen_call(spec, r, heads_kv);
    const std::vector<Tiling> all_forms = forms(spec, run.call.problem);
    for (const Tiling& form : all_forms) {
      SCOPED_TRACE(to_string(form));
      const std::vector<std::uint16_t> poison = [&] {
        std::vector<std::uint16_t> p(run.dout.size() / 2);
        test::fill_nan(p, spec.out);
        return p;
      }();
      run.dout.upload(poison.data(), run.dout.size());
      if (form == all_forms.front()) {
        runtime_->attention(run.call, stream_->get());   // the call as an engine makes it
      } else {
        const auto prepared = runtime_->prepare_with(run.call, form, stream_->get());
        runtime_->run(*prepared, run.call.o, 0.f, run.call.lse, stream_->get());
      }
      stream_->synchronize();
      const Outputs got = read_varlen(run, r, spec);
      const Outputs want = per_sequence(*runtime_, spec, r, heads_kv, form, *stream_);
      size_t o_differ = 0, l_differ = 0;
      for (size_t b = 0; b < r.q.size(); ++b) {
        o_differ += test::values_differ(got.o[b], want.o[b]);
        l_differ += lse_differ(got.lse[b], want.lse[b]);
      }
      std::printf("[ varlen ] %-78s %-30s %zu O / %zu LSE values differ from per-sequence calls\n", text,
                  to_string(form).c_str(), o_differ, l_differ);
      EXPECT_EQ(o_differ, 0u);
      EXPECT_EQ(l_differ, 0u);
    }
  }
}

// Statistics over the batch (per_tensor scales) or a plan chosen at the batch's bounds (smoothing
// means) may quantize a sequence differently from its own call: each sequence is held to a float64
// reference, within its own call's error (+ a little).
TEST_F(VarlenAttention, SmoothedAndPerTensorFormatsKeepTheirAccuracy) {
  const char* specs[] = {
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
      "prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=64",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qk",
      "prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=k rotate=hadamard",
  };
  for (const char* text : specs) {
    Spec spec = runtime_->resolve(parse_spec(text));
    spec.varlen = true;
    const int heads_kv = 2;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const Ragged r = make_ragged(spec, heads_kv, kRagged, seed);
    VarlenRun run = varlen_call(spec, r, heads_kv);
    runtime_->attention(run.call, stream_->get());
    stream_->synchronize();
    const Outputs got = read_varlen(run, r, spec);
    const Tiling form = forms(spec, run.call.problem).front();
    const Outputs alone = per_sequence(*runtime_, spec, r, heads_kv, form, *stream_);
    for (size_t b = 0; b < r.q.size(); ++b) {
      std::vector<double> lse;
      const HostTensor ref = test::reference_attention(r.q[b], r.k[b], r.v[b], {spec.causal, 0.0}, &lse, Layout::bshd);
      const test::ErrorMetrics mv = test::compare(ref, got.o[b]);
      const test::ErrorMetrics ma = test::compare(ref, alone.o[b]);
      std::printf("[ varlen ] %-88s seq %zu (q %d, kv %d): packed %s | alone %s\n", text, b, r.q[b].shape.seq,
                  r.k[b].shape.seq, mv.report().c_str(), ma.report().c_str());
      EXPECT_EQ(mv.nonfinite, 0);
      // per_tensor Q/K/V: one abs-max for the whole batch, so a sequence with smaller values than the
      // batch's largest is quantized more coarsely than by its own call (H100, seed 11536355925089867671:
      // rel L2 0.0343 packed against 0.0194 alone for a 17-row sequence); the others quantize per sequence.
      const bool batch_scale = spec.qk.gran == Gran::per_tensor;
      EXPECT_LE(mv.rel_l2, batch_scale ? 2.5 * ma.rel_l2 + 0.02 : 1.25 * ma.rel_l2 + 0.01) << "sequence " << b;
      // LSE: within the call alone's largest LSE error (+ a little); rows without keys -inf in both.
      double err_packed = 0, err_alone = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        const double l = got.lse[b][i], a = alone.lse[b][i];
        if (std::isinf(lse[i])) {
          EXPECT_TRUE(std::isinf(l) && l < 0) << "sequence " << b << " lse row " << i;
          continue;
        }
        err_packed = std::isfinite(l) ? std::max(err_packed, std::fabs(l - lse[i])) : INFINITY;
        err_alone = std::max(err_alone, std::fabs(a - lse[i]));
      }
      std::printf("[ varlen ] %-88s seq %zu LSE max abs error: packed %.3e, alone %.3e\n", text, b, err_packed, err_alone);
      // The batch's scale again (H100, seed 10048631465593553636: a one-key sequence's LSE off by 0.388
      // packed against 0.041 alone; earlier runs up to ~2.8x and +0.5 absolute).
      EXPECT_LE(err_packed, batch_scale ? 2.5 * err_alone + 0.5 : 1.25 * err_alone + 0.02) << "sequence " << b;
    }
  }
}

// A long sequence beside short ones (the grid covers the longest; the others' CTAs past their rows
// return), against per-sequence calls.
TEST_F(VarlenAttention, LongAndShortSequencesInOneBatch) {
  for (const char* text : {"prefill qk=bf16 pv=bf16 out=bf16 d=128 causal gqa=4",
                           "prefill qk=int8:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4"}) {
    Spec spec = runtime_->resolve(parse_spec(text));
    spec.varlen = true;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const Ragged r = make_ragged(spec, 2, {{4097, 4097}, {3, 3}, {64, 4096}, {1, 2000}}, seed);
    VarlenRun run = varlen_call(spec, r, 2);
    runtime_->attention(run.call, stream_->get());
    stream_->synchronize();
    const Outputs got = read_varlen(run, r, spec);
    const Outputs want = per_sequence(*runtime_, spec, r, 2, forms(spec, run.call.problem).front(), *stream_);
    size_t differ = 0;
    for (size_t b = 0; b < r.q.size(); ++b) differ += test::values_differ(got.o[b], want.o[b]) + lse_differ(got.lse[b], want.lse[b]);
    std::printf("[ varlen ] %-78s long + short: %zu values differ\n", text, differ);
    EXPECT_EQ(differ, 0u);
  }
}

// Captured once (after an eager run), the graph replays a batch of other lengths within the same bounds,
// written into the captured buffers, with the eager call's bits.
TEST_F(VarlenAttention, GraphReplaysOtherLengthsWithTheEagerBits) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);
  for (const char* text : {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=k",
                           "prefill qk=fp16 pv=fp16 out=fp16 d=64 causal"}) {
    Spec spec = runtime_->resolve(parse_spec(text));
    spec.varlen = true;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    // Same bounds (max 300 / 900) and totals no larger than the first batch's buffers (347 / 1040 rows).
    Ragged first = make_ragged(spec, 2, {{300, 900}, {40, 40}, {7, 100}}, seed);
    const Ragged second = make_ragged(spec, 2, {{5, 900}, {300, 100}, {33, 33}}, seed + 5);
    VarlenRun run = varlen_call(spec, first, 2);
    runtime_->attention(run.call, stream_->get());   // eager first: compiles, loads, sizes the workspace
    stream_->synchronize();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    const auto& d = rt::driver();
    rt::check(d.cuStreamBeginCapture(stream_->get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    runtime_->attention(run.call, stream_->get());
    rt::check(d.cuStreamEndCapture(stream_->get(), &graph), "cuStreamEndCapture");
    rt::check(d.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    // The second batch into the captured buffers (its totals fit), a poisoned output, the replay.
    auto fill = [](rt::DeviceBuffer& dst, const rt::DeviceBuffer& src) { dst.upload(src.to_vector<std::uint8_t>().data(), src.size()); };
    fill(first.dq, second.dq);
    fill(first.dk, second.dk);
    fill(first.dv, second.dv);
    fill(first.dcu_q, second.dcu_q);
    fill(first.dcu_kv, second.dcu_kv);
    std::vector<std::uint16_t> poison(run.dout.size() / 2);
    test::fill_nan(poison, spec.out);
    run.dout.upload(poison.data(), run.dout.size());
    rt::check(d.cuGraphLaunch(exec, stream_->get()), "cuGraphLaunch");
    stream_->synchronize();
    const Outputs replayed = read_varlen(run, second, spec);
    run.dout.upload(poison.data(), run.dout.size());
    runtime_->attention(run.call, stream_->get());
    stream_->synchronize();
    const Outputs eager = read_varlen(run, second, spec);
    size_t differ = 0;
    for (size_t b = 0; b < second.q.size(); ++b)
      differ += test::values_differ(replayed.o[b], eager.o[b]) + lse_differ(replayed.lse[b], eager.lse[b]);
    std::printf("[ varlen ] %-78s graph replay on other lengths: %zu values differ from eager\n", text, differ);
    EXPECT_EQ(differ, 0u);
    d.cuGraphExecDestroy(exec);
    d.cuGraphDestroy(graph);
  }
}

// A variable-length plan for bounds (3 sequences, at most 300 / 900 rows) runs batches of other
// compositions inside them with the bits of attention() on each, with its own workspace.
TEST_F(VarlenAttention, PlanRunsOtherCompositionsWithTheBitsOfAttention) {
  for (const char* text : {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
                           "prefill qk=fp16 pv=fp16 out=fp16 d=64 causal"}) {
    Spec spec = runtime_->resolve(parse_spec(text));
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const Ragged first = make_ragged(spec, 2, {{300, 900}, {40, 40}, {7, 100}}, seed);
    const Ragged second = make_ragged(spec, 2, {{5, 900}, {300, 100}, {33, 33}}, seed + 5);
    VarlenRun bounds = varlen_call(spec, first, 2);
    const auto plan = runtime_->plan_attention(bounds.call);
    size_t differ = 0;
    for (const Ragged* r : {&first, &second}) {
      VarlenRun eager = varlen_call(spec, *r, 2);
      runtime_->attention(eager.call, stream_->get());
      VarlenRun planned = varlen_call(spec, *r, 2);
      AttentionRun run;
      run.q = planned.call.q.data, run.k = planned.call.k.data, run.v = planned.call.v.data;
      run.o = planned.call.o.data;
      run.lse = planned.call.lse;
      run.cu_seqlens_q = planned.call.cu_seqlens_q;
      run.cu_seqlens_kv = planned.call.cu_seqlens_kv;
      runtime_->run(*plan, run, stream_->get());
      stream_->synchronize();
      const Outputs a = read_varlen(eager, *r, spec), b = read_varlen(planned, *r, spec);
      for (size_t s = 0; s < r->q.size(); ++s) {
        differ += test::values_differ(a.o[s], b.o[s]) + lse_differ(a.lse[s], b.lse[s]);
        EXPECT_GE(test::compare(test::reference_attention(r->q[s], r->k[s], r->v[s], {spec.causal, 0.0}, nullptr, Layout::bshd), b.o[s]).cosine, 0.999);
      }
    }
    std::printf("[ varlen ] %-78s plan over two compositions: %zu values differ from attention()\n", text, differ);
    EXPECT_EQ(differ, 0u);
  }
}

}  // namespace
}  // namespace qattn

namespace qattn {
namespace {

// The tokens of `r` as a KV cache of `cache_spec` holds them (the host's dequantization of the cache's
// bytes, rounded to the call's type), uploaded as a ragged batch with r's queries.
Ragged as_cached(const Spec& spec, const Ragged& r, const test::HostKvCache& k, const test::HostKvCache& v) {
  Ragged out;
  out.q = r.q;
  out.cu_q = r.cu_q;
  out.cu_kv = r.cu_kv;
  out.max_q = r.max_q;
  out.max_kv = r.max_kv;
  const int d = spec.head_dim;
  std::vector<double> row(static_cast<size_t>(d));
  for (size_t b = 0; b < r.k.size(); ++b)
    for (int which = 0; which < 2; ++which) {
      const HostTensor& src = which == 0 ? r.k[b] : r.v[b];
      HostTensor t = HostTensor::zeros(src.shape, Layout::bshd);
      for (int h = 0; h < src.shape.heads; ++h)
        for (int s = 0; s < src.shape.seq; ++s) {
          test::read_token(which == 0 ? k : v, static_cast<int>(b), h, s, row.data());
          for (int c = 0; c < d; ++c) t.at(0, h, s, c) = row[static_cast<size_t>(c)];
        }
      test::round_to(t, spec.out);
      (which == 0 ? out.k : out.v).push_back(std::move(t));
    }
  out.dq = packed_upload(out.q, spec.out);
  out.dk = packed_upload(out.k, spec.out);
  out.dv = packed_upload(out.v, spec.out);
  out.dcu_q = rt::DeviceBuffer::from(out.cu_q);
  out.dcu_kv = rt::DeviceBuffer::from(out.cu_kv);
  return out;
}

// Every sequence's keys and values of `r` into the cache (host model `layout`: paged, or contiguous of
// `capacity` tokens), by slot mapping from the packed tokens.
void append_by_slots(Runtime& runtime, const Spec& cache_spec, const KvCacheView& view, const test::HostKvCache& layout,
                     int capacity, const Ragged& r, const std::vector<Seq>& seqs, void* stream) {
  const int page = layout.paged ? layout.page_size : 0, batch = static_cast<int>(seqs.size());
  std::vector<long long> slots;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < seqs[static_cast<size_t>(b)].kv_len; ++t)
      slots.push_back(page ? static_cast<long long>(layout.block_table[static_cast<size_t>(b) * layout.table_stride + t / page]) * page + t % page
                           : static_cast<long long>(b) * capacity + t);
  rt::DeviceBuffer dslots = rt::DeviceBuffer::from(slots);
  AppendKvCall append;
  append.spec = cache_spec;
  append.heads_kv = layout.heads_kv;
  append.n_new = static_cast<int>(slots.size());
  append.k = r.dk.as<void>();
  append.v = r.dv.as<void>();
  append.sh = layout.d, append.ss = static_cast<long long>(layout.heads_kv) * layout.d;
  append.cache = view;
  append.slot_mapping = dslots.as<long long>();
  append.num_slots = page ? static_cast<long long>(batch) * layout.table_stride * page : static_cast<long long>(batch) * capacity;
  runtime.append_kv(append, stream);
  rt::synchronize_device(0);   // the slot buffer is freed on return
}

// Prefill over a KV cache (AttentionCall::kv_cache): each sequence's tokens written into a contiguous or
// paged cache of every row format (by slot mapping, from the packed tokens), then this chunk's queries
// read the first kv_len rows: the same as the variable-length call over the tokens as the cache holds
// them (bit for bit for a 16-bit cache, whose rows are the tokens; within rounding for a quantized one,
// dequantized on the host), and close to float64 on those tokens. Chunks of 1, 15, 16, 17 and 130
// queries over 1 to 700 cached tokens, causal at each sequence's end, GQA 4.
TEST_F(VarlenAttention, PrefillOverACacheEqualsTheCallOverItsTokens) {
  const std::vector<Seq> seqs = {{1, 1}, {15, 40}, {16, 16}, {17, 100}, {130, 700}};
  const char* caches[] = {"fp16 pv=fp16", "int8:per_token pv=int8:per_token", "int4:per_group pv=int4:per_group",
                          "fp8e4m3:per_head pv=fp8e4m3:per_head"};
  const char* prefills[] = {"prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
                            "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k"};
  const int heads_kv = 2, d = 128, capacity = 700, batch = static_cast<int>(seqs.size());
  for (const char* ptext : prefills)
    for (const char* ctext : caches)
      for (int page : {0, 16}) {
        Spec spec = runtime_->resolve(parse_spec(ptext));
        spec.varlen = true;
        const Spec cache_spec =
            runtime_->resolve(parse_spec(std::string("decode qk=") + ctext + " out=fp16 d=128 gqa=4" + (page ? " paged" : "")));
        const std::uint64_t seed = test::fresh_seed();
        SCOPED_TRACE(std::string(ptext) + " over " + to_string(cache_spec) + " " + test::seed_note(seed));
        const Ragged r = make_ragged(spec, heads_kv, seqs, seed);
        test::HostKvCache k = page ? test::make_paged(cache_spec.qk.fmt, cache_spec.qk.gran, d, batch, heads_kv, page,
                                                      (capacity + page - 1) / page, seed)
                                   : test::make_contiguous(cache_spec.qk.fmt, cache_spec.qk.gran, d, batch, heads_kv, capacity);
        std::fill(k.head_scale.begin(), k.head_scale.end(), 40.f / kv::kFp8Max);   // |x| up to 40: no saturation
        test::HostKvCache v = k;
        rt::DeviceBuffer dk = rt::DeviceBuffer::from(k.bytes), dv = rt::DeviceBuffer::from(v.bytes);
        rt::DeviceBuffer table = rt::DeviceBuffer::from(page ? k.block_table : std::vector<int>{0});
        rt::DeviceBuffer scales = rt::DeviceBuffer::from(k.head_scale);
        KvCacheView view;
        view.k = dk.as<void>();
        view.v = dv.as<void>();
        if (page) {
          view.page_size = page;
          view.block_table = table.as<int>();
          view.table_stride = k.table_stride;
        } else {
          view.capacity = capacity;
        }
        view.k_head_scale = view.v_head_scale = scales.as<float>();

        append_by_slots(*runtime_, cache_spec, view, k, capacity, r, seqs, stream_->get());

        std::vector<int> lens;
        for (const Seq& s : seqs) lens.push_back(s.kv_len);
        rt::DeviceBuffer dlens = rt::DeviceBuffer::from(lens);
        KvSource source{cache_spec, view, dlens.as<int>()};
        VarlenRun over = varlen_call(spec, r, heads_kv);
        over.call.k = over.call.v = TensorView{};
        over.call.cu_seqlens_kv = nullptr;
        over.call.kv_cache = &source;
        runtime_->attention(over.call, stream_->get());
        stream_->synchronize();
        const Outputs got = read_varlen(over, r, spec);

        k.bytes = dk.to_vector<unsigned char>();
        v.bytes = dv.to_vector<unsigned char>();
        const Ragged cached = as_cached(spec, r, k, v);
        VarlenRun dense = varlen_call(spec, cached, heads_kv);
        runtime_->attention(dense.call, stream_->get());
        stream_->synchronize();
        const Outputs want = read_varlen(dense, cached, spec);
        const bool rows_are_tokens = cache_spec.qk.fmt == Fmt::fp16;
        for (size_t b = 0; b < seqs.size(); ++b) {
          const test::ErrorMetrics same = test::compare(want.o[b], got.o[b]);
          const HostTensor ref = test::reference_attention(cached.q[b], cached.k[b], cached.v[b], {true, 0.0}, nullptr, Layout::bshd);
          const test::ErrorMetrics exact = test::compare(ref, got.o[b]);
          std::printf("[ cache prefill ] %-70s over %-60s seq %zu: vs dense %s | vs float64 %s\n", ptext,
                      to_string(cache_spec).c_str(), b, same.report().c_str(), exact.report().c_str());
          EXPECT_EQ(same.nonfinite, 0);
          if (rows_are_tokens) EXPECT_EQ(same.max_abs, 0.0) << "sequence " << b;
          else EXPECT_GE(same.cosine, 0.99999) << "sequence " << b;
          EXPECT_GE(exact.cosine, spec.quantized() ? 0.995 : 0.9999) << "sequence " << b;
        }
      }
}

// A plan over a KV cache (AttentionCall::kv_cache at plan time, AttentionRun::kv_cache per run): made for
// bounds, it runs two batch compositions below them, with its own workspace and with the caller's, and
// gives attention()'s bits over the same cache (paged int8 rows, an int8 prefill with K smoothing).
TEST_F(VarlenAttention, PlanOverACacheRunsWithTheBitsOfAttentionOverIt) {
  const int heads_kv = 2, d = 128, page = 16, batch = 5, max_q = 130, max_kv = 700;
  Spec spec = runtime_->resolve(parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k"));
  spec.varlen = true;
  const Spec cache_spec = runtime_->resolve(parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 paged"));
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  test::HostKvCache layout =
      test::make_paged(cache_spec.qk.fmt, cache_spec.qk.gran, d, batch, heads_kv, page, (max_kv + page - 1) / page, seed);
  rt::DeviceBuffer dk = rt::DeviceBuffer::from(layout.bytes), dv = rt::DeviceBuffer::from(layout.bytes);
  rt::DeviceBuffer table = rt::DeviceBuffer::from(layout.block_table);
  KvCacheView view;
  view.k = dk.as<void>();
  view.v = dv.as<void>();
  view.page_size = page;
  view.block_table = table.as<int>();
  view.table_stride = layout.table_stride;
  rt::DeviceBuffer lens0 = rt::DeviceBuffer::from(std::vector<int>(batch, 1));
  KvSource bounds{cache_spec, view, lens0.as<int>()};
  AttentionCall shape;
  shape.spec = spec;
  shape.problem = Problem{batch, heads_kv * spec.gqa, heads_kv, max_q, max_kv};
  shape.q = packed(nullptr, shape.problem.heads_q, d);
  shape.o = packed(nullptr, shape.problem.heads_q, d);
  shape.cu_seqlens_q = lens0.as<int>();
  shape.kv_cache = &bounds;
  const auto own = runtime_->plan_attention(shape);
  const auto theirs = runtime_->plan_attention(shape, /*own_workspace=*/false);
  EXPECT_EQ(own->workspace_bytes(), theirs->workspace_bytes());
  rt::DeviceBuffer workspace(theirs->workspace_bytes(), 0);
  size_t differ = 0;
  const std::vector<std::vector<Seq>> compositions = {{{1, 1}, {15, 40}, {16, 16}, {17, 100}, {130, 700}},
                                                      {{3, 9}, {130, 600}, {1, 1}, {40, 80}, {7, 7}}};
  for (size_t n = 0; n < compositions.size(); ++n) {
    const Ragged r = make_ragged(spec, heads_kv, compositions[n], seed + 100 * n);
    append_by_slots(*runtime_, cache_spec, view, layout, max_kv, r, compositions[n], stream_->get());
    std::vector<int> lens;
    for (const Seq& s : compositions[n]) lens.push_back(s.kv_len);
    rt::DeviceBuffer dlens = rt::DeviceBuffer::from(lens);
    KvSource source{cache_spec, view, dlens.as<int>()};

    VarlenRun eager = varlen_call(spec, r, heads_kv);
    eager.call.problem = shape.problem;   // the plan's bounds: the same kernel and gather
    eager.call.k = eager.call.v = TensorView{};
    eager.call.cu_seqlens_kv = nullptr;
    eager.call.kv_cache = &source;
    runtime_->attention(eager.call, stream_->get());
    for (const AttentionPlan* plan : {own.get(), theirs.get()}) {
      VarlenRun planned = varlen_call(spec, r, heads_kv);
      AttentionRun run;
      run.q = planned.call.q.data;
      run.o = planned.call.o.data;
      run.lse = planned.call.lse;
      run.cu_seqlens_q = planned.call.cu_seqlens_q;
      run.kv_cache = &source;
      run.workspace = plan == theirs.get() ? workspace.as<void>() : nullptr;
      runtime_->run(*plan, run, stream_->get());
      stream_->synchronize();
      const Outputs a = read_varlen(eager, r, spec), b = read_varlen(planned, r, spec);
      for (size_t s = 0; s < r.q.size(); ++s) differ += test::values_differ(a.o[s], b.o[s]) + lse_differ(a.lse[s], b.lse[s]);
      AttentionRun dense = run;   // a plan over a cache refuses dense k / v
      dense.k = r.dk.as<void>();
      EXPECT_THROW(runtime_->run(*plan, dense, stream_->get()), Error);
    }
  }
  std::printf("[ cache prefill ] plan over a paged int8 cache, two compositions, own and caller workspace: %zu values "
              "differ from attention()\n", differ);
  EXPECT_EQ(differ, 0u);
}

}  // namespace
}  // namespace qattn
