// The helper passes a GPU test launches by hand (quantizers, ...): compiled with NVRTC for the device
// under test once per kernel name, loaded, and kept for the test's lifetime.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "qattn/quant/quant_shape.h"
#include "qattn/render.hpp"
#include "qattn/spec.hpp"
#include "runtime/device.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/helper_kernels.hpp"
#include "runtime/module.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace qattn::test {

class PassCache {
 public:
  const rt::Kernel& get(const Source& src, int device) {
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
inline void run_quant_plan(PassCache& passes, const quant::QuantRequest& req, const quant::QuantPlan& plan,
                           const QuantParams& qp, int device) {
  const Arch arch = parse_arch(rt::arch_for(rt::query_device(device)));
  for (const quant::QuantLaunch& l : plan.launches) {
    if (l.zero_scratch_floats) rt::fill_bytes(reinterpret_cast<CUdeviceptr>(qp.amax_scratch), 0, sizeof(float) * l.zero_scratch_floats, device);
    passes.get(rt::quant_source(req, l, arch), device)
        .launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes, nullptr, qp);
  }
  rt::synchronize_device(device);
}

}  // namespace qattn::test
