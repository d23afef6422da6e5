// One translation unit -> cubin with NVRTC. The device templates are handed to NVRTC as in-memory
// headers (qattn::gen::embedded_templates()), so no include path and no CUDA toolkit is needed at run time:
// libnvrtc alone compiles, and a driver is only needed to load the result.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace qattn::rt {

struct CompileRequest {
  std::string source;
  std::string program_name;                // appears in diagnostics ("<name>(12): error: ...")
  std::string arch;                        // one of supported_archs()
  std::vector<std::string> extra_options;  // appended after the defaults, e.g. "-lineinfo"
  bool want_ptx = false;
  // C++ names of __global__ template instances to look up (nvrtcAddNameExpression); their mangled
  // names come back in CompileResult::lowered_names. extern "C" kernels need none.
  std::vector<std::string> name_expressions;
};

// Resources of one kernel (-1: unknown). Registers, stack and static shared memory come from the
// cubin itself (always there); spills only from the ptxas -v report, which every compile prints since
// NVRTC's own cache is off (see compile()).
struct KernelUsage {
  std::string name;   // as ptxas names it (mangled unless extern "C")
  int registers = -1, spill_store_bytes = -1, spill_load_bytes = -1, static_smem_bytes = -1,
      stack_bytes = -1;
  // ptxas said "wgmma.mma_async instructions are serialized" (C75xx: e.g. C7511, too few registers for
  // the wgmma pipeline): it then waits for a wgmma before issuing the next, which is correct but slower
  // where it hits the tile loop (docs/cli.md, `qattn compile`). From the report, so false without one.
  bool wgmma_serialized = false;
};

struct CompileResult {
  bool ok = false;
  std::string log;                          // NVRTC diagnostics and the ptxas -v report
  std::vector<unsigned char> cubin;         // SASS for `arch` (sm_90a: real sm_90a code)
  std::string ptx;                          // only when want_ptx
  std::vector<std::string> options_used;
  // The maximum over the kernels of the unit (-1 if unknown); see KernelUsage.
  int registers = -1, spill_store_bytes = -1, spill_load_bytes = -1, static_smem_bytes = -1,
      stack_bytes = -1;
  bool wgmma_serialized = false;            // any kernel's (see KernelUsage)
  std::vector<KernelUsage> kernels;         // per kernel (__global__ function), in cubin order
  std::map<std::string, std::string> lowered_names;   // name expression -> mangled name
  double compile_ms = 0.0;
};

// Compiles with: -std=c++17 -arch=<arch> -default-device --ptxas-options=-v -no-cache, then
// extra_options. -no-cache turns off NVRTC's own cache (NVRTC 12.9+, kept in the driver's compute
// cache where a driver is installed): qattn's binary cache is the one cache, keyed by source, options
// and toolchain; NVRTC's served a repeated compile in tens of milliseconds without the ptxas report
// (so without spill counts) and made a "cold" compile in a benchmark a cache lookup
// (docs/design/cache.md, "What a cold compile costs"). It changes no generated code, so binary-cache
// keys need not change with it; an option that changes code must come through extra_options, which
// are part of the key.
// A compile error gives ok = false and the diagnostics in log. Throws std::invalid_argument for an
// arch outside supported_archs(). Thread-safe: concurrent calls share nothing mutable.
CompileResult compile(const CompileRequest& request);

const std::vector<std::string>& supported_archs();   // sm_80, sm_86, sm_89, sm_90, sm_90a
bool is_supported_arch(const std::string& arch);

// The NVRTC library's version, "13.0".
std::string nvrtc_version();

// Parses a ptxas -v report (one block per kernel). Exposed for tests.
std::vector<KernelUsage> parse_ptxas_report(const std::string& log);

// Reads the kernels of a cubin and their registers, stack frame and static shared memory from its ELF
// sections (spills stay -1: ptxas does not record them). Empty when the image is not a CUDA ELF.
std::vector<KernelUsage> read_cubin_usage(const std::vector<unsigned char>& cubin);

}  // namespace qattn::rt
