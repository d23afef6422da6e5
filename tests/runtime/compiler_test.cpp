// NVRTC compilation on the CPU alone: every supported arch, diagnostics, ptxas resource parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/runtime/test_kernels.hpp"

namespace qattn::rt {
namespace {

CompileRequest abi_request(const std::string& arch) {
  CompileRequest r;
  r.source = test::abi_kernels_source();
  r.program_name = "abi_kernels.cu";
  r.arch = arch;
  return r;
}

const KernelUsage* find_kernel(const CompileResult& r, const std::string& name) {
  for (const KernelUsage& k : r.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

bool is_elf(const std::vector<unsigned char>& image) {
  return image.size() > 64 && std::memcmp(image.data(), "\x7f" "ELF", 4) == 0;
}

TEST(NvrtcCompiler, CompilesAnAbiKernelForEverySupportedArch) {
  ASSERT_EQ(supported_archs(), (std::vector<std::string>{"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}));
  std::vector<std::vector<unsigned char>> cubins;
  for (const std::string& arch : supported_archs()) {
    SCOPED_TRACE(arch);
    CompileResult r = compile(abi_request(arch));
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_TRUE(is_elf(r.cubin));
    EXPECT_NE(std::find(r.options_used.begin(), r.options_used.end(), "-arch=" + arch),
              r.options_used.end());
    ASSERT_EQ(r.kernels.size(), 2u) << r.log;   // ptxas reports them in an order of its own
    EXPECT_NE(find_kernel(r, "write_pattern"), nullptr) << r.log;
    EXPECT_NE(find_kernel(r, "reverse_through_smem"), nullptr) << r.log;
    for (const KernelUsage& k : r.kernels) {
      EXPECT_GT(k.registers, 0) << k.name;
      EXPECT_LT(k.registers, 256) << k.name;
      EXPECT_LE(k.spill_store_bytes, 0) << k.name;   // none, or no ptxas report (-1)
      EXPECT_EQ(k.stack_bytes, 0) << k.name;
      EXPECT_EQ(k.static_smem_bytes, 0) << k.name;   // dynamic shared memory is not counted
    }
    // Where NVRTC printed the ptxas report, the cubin says the same.
    for (const KernelUsage& reported : parse_ptxas_report(r.log)) {
      const KernelUsage* k = find_kernel(r, reported.name);
      ASSERT_NE(k, nullptr) << reported.name;
      EXPECT_EQ(k->registers, reported.registers) << k->name;
      EXPECT_EQ(k->spill_store_bytes, reported.spill_store_bytes) << k->name;
    }
    EXPECT_EQ(r.registers, std::max(r.kernels[0].registers, r.kernels[1].registers));
    EXPECT_GT(r.compile_ms, 0.0);
    EXPECT_EQ(r.log.find('\0'), std::string::npos);
    EXPECT_TRUE(r.ptx.empty());   // not asked for
    cubins.push_back(r.cubin);
  }
  // sm_90a must be its own code, not the sm_90 cubin under another name.
  EXPECT_NE(cubins[3], cubins[4]);
}

// NVRTC (12.9+) keeps its own cache in the driver's compute cache where a driver is installed; a
// repeated compile served from it skipped NVVM and ptxas and printed no ptxas report. With its cache
// off, every compile is a real one: the second of two identical compiles reports spills like the first.
TEST(NvrtcCompiler, ARepeatedCompileStillRunsPtxas) {
  const CompileRequest req = abi_request("sm_90a");
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const CompileResult r = compile(req);
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_NE(std::find(r.options_used.begin(), r.options_used.end(), "-no-cache"), r.options_used.end());
    EXPECT_EQ(parse_ptxas_report(r.log).size(), 2u) << r.log;
    for (const KernelUsage& k : r.kernels) EXPECT_EQ(k.spill_store_bytes, 0) << k.name;
  }
}

TEST(NvrtcCompiler, Sm90aPtxTargetsTheArchSpecificVariant) {
  CompileRequest req = abi_request("sm_90a");
  req.want_ptx = true;
  CompileResult r = compile(req);
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_NE(r.ptx.find(".target sm_90a"), std::string::npos) << r.ptx.substr(0, 400);
  EXPECT_NE(r.ptx.find(".entry write_pattern"), std::string::npos);
}

TEST(NvrtcCompiler, SyntaxErrorGivesTheLineInTheLog) {
  CompileRequest req;
  req.program_name = "broken.cu";
  req.arch = "sm_89";
  req.source = "#include \"qattn/abi.h\"\n"
               "extern \"C\" __global__ void k(qattn::AttentionParams p) {\n"
               "  int x = p.batch +;\n"
               "}\n";
  CompileResult r = compile(req);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_NE(r.log.find("broken.cu(3)"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
}

TEST(NvrtcCompiler, MissingEmbeddedHeaderIsACompileError) {
  CompileRequest req;
  req.program_name = "missing.cu";
  req.arch = "sm_80";
  req.source = "#include \"qattn/no_such_header.h\"\n";
  CompileResult r = compile(req);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("no_such_header.h"), std::string::npos) << r.log;
}

TEST(NvrtcCompiler, UnknownArchIsRejectedWithTheAcceptedList) {
  CompileRequest req = abi_request("sm_75");
  try {
    compile(req);
    FAIL() << "sm_75 was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sm_75"), std::string::npos) << what;
    for (const std::string& arch : supported_archs())
      EXPECT_NE(what.find(arch), std::string::npos) << what;
  }
  EXPECT_FALSE(is_supported_arch("compute_90"));
  EXPECT_TRUE(is_supported_arch("sm_90a"));
}

TEST(NvrtcCompiler, ReportsStackAndStaticSharedMemoryFromTheCubin) {
  // A dynamically indexed local array cannot live in registers: ptxas gives it a stack frame.
  CompileRequest req;
  req.program_name = "stack.cu";
  req.source = "#include \"qattn/abi.h\"\n"
               "extern \"C\" __global__ void uses_stack(qattn::AttentionParams p) {\n"
               "  __shared__ float tile[300];\n"
               "  const float* in = static_cast<const float*>(p.q.ptr);\n"
               "  float a[64];\n"
               "  for (int i = 0; i < 64; ++i) a[(threadIdx.x + i * p.batch) & 63] = in[i];\n"
               "  tile[threadIdx.x] = a[p.kv_len & 63];\n"
               "  __syncthreads();\n"
               "  static_cast<float*>(p.o.ptr)[threadIdx.x] = tile[299 - threadIdx.x];\n"
               "}\n";
  for (const char* arch : {"sm_80", "sm_90a"}) {
    SCOPED_TRACE(arch);
    req.arch = arch;
    CompileResult r = compile(req);
    ASSERT_TRUE(r.ok) << r.log;
    ASSERT_EQ(r.kernels.size(), 1u);
    EXPECT_EQ(r.kernels[0].name, "uses_stack");
    EXPECT_GE(r.stack_bytes, 256) << r.log;
    EXPECT_EQ(r.static_smem_bytes, 1200) << r.log;   // sm_90's reserved 1 KB is not the kernel's
    EXPECT_GT(r.registers, 0);
    const std::vector<KernelUsage> reported = parse_ptxas_report(r.log);
    if (!reported.empty()) {
      EXPECT_EQ(r.stack_bytes, reported[0].stack_bytes);
      EXPECT_EQ(r.static_smem_bytes, reported[0].static_smem_bytes);
    }
  }
}

TEST(CubinUsage, NotAnElfGivesNothing) {
  EXPECT_TRUE(read_cubin_usage({}).empty());
  EXPECT_TRUE(read_cubin_usage(std::vector<unsigned char>(200, 0x7f)).empty());
  CompileResult r = compile(abi_request("sm_86"));
  ASSERT_TRUE(r.ok) << r.log;
  std::vector<unsigned char> truncated(r.cubin.begin(), r.cubin.begin() + r.cubin.size() / 2);
  EXPECT_TRUE(read_cubin_usage(truncated).empty());   // section table is at the end
  EXPECT_EQ(read_cubin_usage(r.cubin).size(), 2u);
}

TEST(NvrtcCompiler, NameExpressionsGiveLoweredNames) {
  CompileRequest req;
  req.program_name = "templated.cu";
  req.arch = "sm_86";
  req.source = "template <int N> __global__ void scaled(float* o) { o[threadIdx.x] *= N; }\n"
               "template __global__ void scaled<3>(float*);\n";
  req.name_expressions = {"scaled<3>"};
  CompileResult r = compile(req);
  ASSERT_TRUE(r.ok) << r.log;
  ASSERT_EQ(r.lowered_names.count("scaled<3>"), 1u);
  EXPECT_EQ(r.lowered_names.at("scaled<3>"), "_Z6scaledILi3EEvPf");
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].name, "_Z6scaledILi3EEvPf");
}

TEST(NvrtcCompiler, ExtraOptionsAreAppendedAfterTheDefaults) {
  CompileRequest req = abi_request("sm_80");
  req.extra_options = {"-lineinfo", "--maxrregcount=24"};
  CompileResult r = compile(req);
  ASSERT_TRUE(r.ok) << r.log;
  const std::vector<std::string> expected = {"-std=c++17", "-arch=sm_80", "-default-device",
                                             "--ptxas-options=-v", "-no-cache", "-lineinfo", "--maxrregcount=24"};
  EXPECT_EQ(r.options_used, expected);
  EXPECT_LE(r.registers, 24);
}

TEST(NvrtcCompiler, VersionIsMajorDotMinor) {
  const std::string v = nvrtc_version();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(v, m, std::regex(R"((\d+)\.(\d+))"))) << v;
  EXPECT_GE(std::stoi(m[1].str()), 12);
}

TEST(PtxasReport, ParsesEntriesAndIgnoresDeviceFunctions) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     32 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'first' for 'sm_90a'\n"
      "ptxas info    : Function properties for first\n"
      "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 16 bytes stack, 2048 bytes smem, "
      "368 bytes cmem[0]\n"
      "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "insufficient register resources for the wgmma pipeline in the function 'second'\n"
      "ptxas info    : Compiling entry function 'second' for 'sm_90a'\n"
      "ptxas info    : Function properties for second\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers, 368 bytes cmem[0]\n";
  const std::vector<KernelUsage> k = parse_ptxas_report(log);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "first");
  EXPECT_EQ(k[0].registers, 168);
  EXPECT_EQ(k[0].stack_bytes, 16);
  EXPECT_EQ(k[0].spill_store_bytes, 4);
  EXPECT_EQ(k[0].spill_load_bytes, 12);
  EXPECT_EQ(k[0].static_smem_bytes, 2048);
  EXPECT_EQ(k[1].name, "second");
  EXPECT_EQ(k[1].registers, 40);
  EXPECT_EQ(k[1].spill_load_bytes, 0);
  EXPECT_EQ(k[1].static_smem_bytes, 0);
  EXPECT_FALSE(k[0].wgmma_serialized);
  EXPECT_TRUE(k[1].wgmma_serialized);
  EXPECT_TRUE(parse_ptxas_report("").empty());
}

}  // namespace
}  // namespace qattn::rt
