// The helper passes a GPU test launches by hand (quantizers, ...): compiled with NVRTC for the device
// under test once per kernel name, loaded, and kept for the test's lifetime.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "generator/quant_plan.hpp"
#include "generator/render.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/spec.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/device/module.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/common/random_data.hpp"

namespace qattn::test {

class PassCache {
 public:
  const rt::Kernel& get(const gen::Source& src, int device) {
    auto it = kernels_.find(src.kernel_name);
    if (it != kernels_.end()) return it->second.second;
    rt::CompileRequest req;
    req.source = src.text;
    req.program_name = src.kernel_name + ".cu";
    req.arch = rt::arch_for(rt::query_device(device));
    const rt::CompileResult r = rt::compile(req);
    EXPECT_TRUE(r.ok) << r.log;
    rt::Module m = rt::Module::load(r.cubin, device);
    rt::Kernel k = m.kernel(src.kernel_name);
    return kernels_.emplace(src.kernel_name, std::make_pair(std::move(m), std::move(k))).first->second.second;
  }

 private:
  std::map<std::string, std::pair<rt::Module, rt::Kernel>> kernels_;
};

// Runs every launch of a quantization plan with `qp` (zeroing the passes' scratch first where a launch
// asks for it), on the default stream, and waits for them.
inline void run_quant_plan(PassCache& passes, const gen::QuantRequest& req, const gen::QuantPlan& plan,
                           const QuantParams& qp, int device) {
  const Arch arch = parse_arch(rt::arch_for(rt::query_device(device)));
  for (const gen::QuantLaunch& l : plan.launches) {
    if (l.zero_scratch_floats) rt::fill_bytes(reinterpret_cast<CUdeviceptr>(qp.amax_scratch), 0, sizeof(float) * l.zero_scratch_floats, device);
    passes.get(gen::render_quant_pass(req, l, arch), device)
        .launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes, nullptr, qp);
  }
  rt::synchronize_device(device);
}

// The device buffers and parameters of one quantizer run on `x` (uploaded as `fmt`): codes poisoned
// with -128 and scales and means with NaN, so that anything a pass leaves unwritten shows. Codes as rows
// of `row_bytes` bytes (Q/K; seq_pad rows per head) or, with req.transpose, V^T per head padded to
// prob.seq_pad. qmax: 448 for fp8 codes, else req.qmax.
struct QuantRun {
  rt::DeviceBuffer x, y, scale, mean, scratch;
  QuantParams qp{};
};

inline QuantRun prepare_quant_run(const HostTensor& x, Fmt fmt, const gen::QuantRequest& req,
                                  const gen::QuantProblem& prob, const gen::QuantPlan& plan, int row_bytes) {
  QuantRun run;
  const long long heads = prob.heads, pad = prob.seq_pad;
  run.x = rt::DeviceBuffer::from(encode(x, fmt));
  std::vector<std::int8_t> codes(static_cast<size_t>(prob.batch * heads * pad * row_bytes));
  fill_poison(codes);
  run.y = rt::DeviceBuffer::from(codes);
  std::vector<float> scales(static_cast<size_t>(plan.scale_floats)), mean(static_cast<size_t>(std::max<long long>(1, plan.mean_floats)));
  fill_nan(scales);
  fill_nan(mean);
  run.scale = rt::DeviceBuffer::from(scales);
  run.mean = rt::DeviceBuffer::from(mean);
  run.scratch = rt::DeviceBuffer(sizeof(float) * static_cast<size_t>(std::max<long long>(1, plan.scratch_floats)));
  QuantParams& qp = run.qp;
  qp.x = TensorRef{run.x.as<void>(), x.strides.sb, x.strides.sh, x.strides.ss, 1};
  qp.y = req.transpose ? TensorRef{run.y.as<void>(), heads * row_bytes * pad, row_bytes * pad, 1, pad}
                       : TensorRef{run.y.as<void>(), heads * pad * row_bytes, pad * row_bytes, row_bytes, 1};
  qp.scale = gen::dense_scale_ref(req, prob, run.scale.as<float>());
  qp.mean = plan.mean_floats ? run.mean.as<float>() : nullptr;
  qp.amax_scratch = plan.scratch_floats ? run.scratch.as<float>() : nullptr;
  qp.batch = prob.batch;
  qp.heads = prob.heads;
  qp.seq_len = prob.seq_len;
  qp.seq_pad = prob.seq_pad;
  qp.d = req.d;
  qp.qmax = req.code == Fmt::fp8e4m3 ? 448.f : static_cast<float>(req.qmax);
  return run;
}

}  // namespace qattn::test
