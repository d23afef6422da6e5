// Every quantization pass the plan can ask for compiles with NVRTC, from the embedded templates only
// (no include directory), for each target architecture. CPU only: NVRTC needs no GPU.
// QATTN_TEST_LEVEL 0: d=128 passes for sm_90a; 1 (CI): every pass on every arch, each head dim on one
// arch: sm_90a 128, sm_80 256 (the passes with the most registers), sm_89 64 and 96 (the grid's helper test
// compiles the d 128 passes the default grid uses on every arch); 2: every pass for sm_80, sm_86,
// sm_89, sm_90, sm_90a.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cstdlib>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/spec.hpp"

namespace qattn {
namespace quant {
namespace {

int test_level() {
  const char* env = std::getenv("QATTN_TEST_LEVEL");
  return env ? std::atoi(env) : 1;
}

// template-id -> __launch_bounds__ (block size, min blocks per SM), over every request the plan accepts,
// in every form: with the statistics pass (resident blocks unknown), in one pass, and with the smoothing
// mean from a sample of the tokens (K with token-local scales; S is a template argument of the
// statistics passes, any S below seq_len instantiates them).
using Bounds = std::pair<unsigned, int>;
void add_passes(std::map<std::string, Bounds>& passes, const gen::QuantRequest& r, gen::QuantProblem p) {
  for (int resident : {0, 1 << 20})
    for (int sample : {0, p.seq_len / 2}) {
      p.resident_blocks = resident;
      p.mean_sample_tokens = sample;
      for (const gen::QuantLaunch& l : gen::plan_quant(r, p).launches) passes[l.pass] = {l.block, l.min_blocks};
    }
}

// The head dims whose passes are compiled for `arch` at `level` (see the top of the file).
std::vector<int> head_dims(const std::string& arch, int level) {
  if (level <= 0) return {128};
  if (level == 1) return arch == "sm_80" ? std::vector<int>{256} : arch == "sm_89" ? std::vector<int>{64, 96}
                                                                                   : std::vector<int>{128};
  return {64, 96, 128, 256};
}

std::map<std::string, Bounds> planned_passes(const std::vector<int>& dims) {
  std::map<std::string, Bounds> passes;
  for (Fmt in : {Fmt::fp16, Fmt::bf16})
    for (int d : dims)
      for (bool smooth : {false, true})
        for (bool transpose : {false, true})
          for (Gran gran : {Gran::per_token, Gran::per_block, Gran::per_tensor, Gran::per_channel, Gran::per_warp,
                            Gran::per_thread})
            for (int group : {32, 64, 128})   // per_block 64 | 128; per_warp / per_thread 32 (Q) | 64 (K)
            for (bool pack4 : {false, true}) {   // qk=int4's packed rows (qmax 7)
              gen::QuantRequest r;
              r.pack4 = pack4;
              r.qmax = pack4 ? 7 : 127;
              r.in = in;
              r.gran = gran;
              r.group = group;
              r.smooth = smooth;
              r.transpose = transpose;
              r.d = d;
              const gen::QuantProblem p{1, 1, 1000, 1024};
              if (!gen::quant_request_error(r, p).empty()) continue;
              add_passes(passes, r, p);
              r.block_mean = true;   // Q smoothing (block means): the plan refuses what it does not cover
              if (!gen::quant_request_error(r, p).empty()) continue;
              add_passes(passes, r, p);
            }
  // rotate=hadamard: Q rows (with or without block means) and K rows (with or without smoothing), each
  // packed or not, at every token-local granularity with its Q or K group. fp16 input only: bf16 changes
  // the unpacking alone, which the passes above cover, and these add ~1/4 to the compile.
  for (Fmt in : {Fmt::fp16})
    for (int d : dims)
      for (Gran gran : {Gran::per_token, Gran::per_block, Gran::per_warp, Gran::per_thread})
        for (int rotate : {kRotateQ, kRotateK})
          for (bool extra : {false, true})   // Q: block means; K: smoothing
            for (bool pack4 : {false, true}) {
              gen::QuantRequest r;
              r.in = in;
              r.gran = gran;
              r.group = gran == Gran::per_token ? 0 : gran == Gran::per_block || rotate == kRotateK ? 64 : 32;
              r.d = d;
              r.rotate = rotate;
              r.pack4 = pack4;
              r.qmax = pack4 ? 7 : 127;
              (rotate == kRotateQ ? r.block_mean : r.smooth) = extra;
              const gen::QuantProblem p{1, 1, 1000, 1024};
              if (!gen::quant_request_error(r, p).empty()) continue;   // block means are not packed
              add_passes(passes, r, p);
            }
  // pv=fp8e4m3: the transposed per-channel V pass with e4m3 codes.
  for (Fmt in : {Fmt::fp16, Fmt::bf16})
    for (int d : dims)
      for (bool smooth : {false, true}) {
        gen::QuantRequest r;
        r.in = in;
        r.gran = Gran::per_channel;
        r.smooth = smooth;
        r.transpose = true;
        r.d = d;
        r.code = Fmt::fp8e4m3;
        add_passes(passes, r, gen::QuantProblem{1, 1, 1000, 1024});
      }
  return passes;
}

std::string render(const std::map<std::string, Bounds>& passes) {
  std::ostringstream os;
  os << "#include \"qattn/quant/quant.cuh\"\n";
  int i = 0;
  for (const auto& [pass, bounds] : passes)
    os << "extern \"C\" __global__ void __launch_bounds__(" << bounds.first
       << (bounds.second ? ", " + std::to_string(bounds.second) : std::string()) << ") qattn_quant_" << i++
       << "(const qattn::QuantParams p) { " << pass << "::run(p); }\n";
  return os.str();
}

// NVRTC compile of `src` from the embedded templates only, for `arch`: its log, and the cubin's size
// (0 when the compile failed).
struct Compiled {
  nvrtcResult rc = NVRTC_ERROR_INTERNAL_ERROR;
  std::string log;
  size_t cubin = 0;
};

Compiled compile(const std::string& src, const std::string& arch) {
  std::vector<const char*> names, texts;
  for (const gen::EmbeddedFile& f : gen::embedded_templates()) {
    names.push_back(f.path);
    texts.push_back(f.text);
  }
  Compiled out;
  nvrtcProgram prog;
  out.rc = nvrtcCreateProgram(&prog, src.c_str(), "quant_passes.cu", static_cast<int>(names.size()), texts.data(),
                              names.data());
  if (out.rc != NVRTC_SUCCESS) return out;
  const std::string arch_opt = "-arch=" + arch;
  const char* opts[] = {"-std=c++17", arch_opt.c_str(), "--ptxas-options=-v"};
  out.rc = nvrtcCompileProgram(prog, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  out.log.assign(n, '\0');
  nvrtcGetProgramLog(prog, out.log.data());
  if (out.rc == NVRTC_SUCCESS) nvrtcGetCUBINSize(prog, &out.cubin);
  nvrtcDestroyProgram(&prog);
  return out;
}

class QuantNvrtc : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantNvrtc, EveryPlannedPassCompiles) {
  const std::string arch = GetParam();
  const int level = test_level();
  if (level <= 0 && arch != "sm_90a") GTEST_SKIP() << "QATTN_TEST_LEVEL=0 compiles sm_90a only";
  if (level <= 1 && (arch == "sm_86" || arch == "sm_90")) GTEST_SKIP() << "needs QATTN_TEST_LEVEL=2";
  const auto passes = planned_passes(head_dims(arch, level));
  ASSERT_GE(passes.size(), 20u);
  const Compiled c = compile(render(passes), arch);
  const nvrtcResult rc = c.rc;
  const std::string& log = c.log;
  const size_t cubin = c.cubin;
  EXPECT_EQ(rc, NVRTC_SUCCESS) << log;
  EXPECT_GT(cubin, 0u);
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  // No pass spills (the one-pass forms run under __launch_bounds__(256, kOnePassMinBlocks)); the d 256
  // Q passes that spilled 8-12 bytes on sm_80 / sm_89 saved registers around fp32 division's slow-path
  // call, which quant_device.cuh's div_rn avoids. NVRTC may
  // serve a repeated compile from its cache without the ptxas report; then there is nothing to check.
  const std::regex spill("([0-9]+) bytes spill stores");
  int reports = 0;
  std::vector<std::string> order;   // kernel qattn_quant_<i> renders the i-th pass
  for (const auto& entry : passes) order.push_back(entry.first);
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it, ++reports) {
    const int bytes = std::stoi((*it)[1].str());
    if (bytes == 0) continue;
    const size_t fn = log.rfind("qattn_quant_", static_cast<size_t>(it->position()));
    const size_t i = fn == std::string::npos ? order.size() : std::strtoul(log.c_str() + fn + 12, nullptr, 10);
    const std::string pass = i < order.size() ? order[i] : std::string("a quantization pass");
    ADD_FAILURE() << pass << " spills " << bytes << " bytes on " << arch;
  }
  std::printf("[ quant ] %zu passes for %s, %d ptxas spill reports checked\n", passes.size(), arch.c_str(), reports);
}

// The LSE correction helpers (templates/qattn/attention/lse_correction.cuh, dense and variable-length Q
// in one kernel each): RowDot for fp16 and bf16 at every head dim, and AddScaled, as the runtime
// renders them, in one translation unit (the helpers' headers are include-guarded).
TEST_P(QuantNvrtc, LseCorrectionCompiles) {
  const std::string arch = GetParam();
  const int level = test_level();
  if (level <= 0 && arch != "sm_90a") GTEST_SKIP() << "QATTN_TEST_LEVEL=0 compiles sm_90a only";
  if (level <= 1 && (arch == "sm_86" || arch == "sm_90")) GTEST_SKIP() << "needs QATTN_TEST_LEVEL=2";
  const Arch target = parse_arch(arch);
  std::string src = gen::render_lse_addscaled(target).text;
  int kernels = 1;
  for (Fmt out : {Fmt::fp16, Fmt::bf16})
    for (int d : {64, 96, 128, 256}) {
      Spec spec;
      spec.out = out;
      spec.head_dim = d;
      spec.arch = target;
      src += gen::render_lse_rowdot(spec).text;
      ++kernels;
    }
  const Compiled c = compile(src, arch);
  EXPECT_EQ(c.rc, NVRTC_SUCCESS) << c.log;
  EXPECT_GT(c.cubin, 0u);
  EXPECT_EQ(c.log.find("warning"), std::string::npos) << c.log;
  const std::regex spill("([1-9][0-9]*) bytes spill stores");
  EXPECT_FALSE(std::regex_search(c.log, spill)) << c.log;
  std::printf("[ quant ] %d LSE correction kernels for %s\n", kernels, arch.c_str());
}

INSTANTIATE_TEST_SUITE_P(Archs, QuantNvrtc, ::testing::Values("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace quant
}  // namespace qattn
