// Parallel compilation: same bytes as serial, request order kept, failures confined to their item.
#include <gtest/gtest.h>

#include "runtime/jit/compile_pool.hpp"

namespace qattn::rt {
namespace {

// Eight programs that differ in a constant, so their cubins differ and an order mix-up shows.
std::vector<CompileRequest> eight_programs() {
  std::vector<CompileRequest> requests;
  for (int i = 0; i < 8; ++i) {
    CompileRequest r;
    r.program_name = "prog" + std::to_string(i) + ".cu";
    r.arch = i % 2 ? "sm_90a" : "sm_80";
    r.source = "#include \"qattn/abi.h\"\n"
               "extern \"C\" __global__ void scale_o(qattn::AttentionParams p) {\n"
               "  float* o = static_cast<float*>(p.o.ptr);\n"
               "  o[threadIdx.x] = o[threadIdx.x] * " + std::to_string(i + 2) + ".5f + p.softmax_scale;\n"
               "}\n";
    requests.push_back(r);
  }
  return requests;
}

TEST(CompilePool, ParallelGivesTheSameCubinsAsSerialInRequestOrder) {
  const std::vector<CompileRequest> requests = eight_programs();
  std::vector<CompileResult> serial;
  for (const CompileRequest& r : requests) serial.push_back(compile(r));
  const std::vector<CompileOutcome> parallel = compile_parallel(requests, 4);
  ASSERT_EQ(parallel.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].program_name);
    ASSERT_TRUE(serial[i].ok) << serial[i].log;
    ASSERT_TRUE(parallel[i].ok()) << parallel[i].error_message();
    EXPECT_EQ(parallel[i].result.cubin, serial[i].cubin);
    EXPECT_EQ(parallel[i].result.registers, serial[i].registers);
  }
  for (size_t i = 0; i + 2 < requests.size(); ++i)
    EXPECT_NE(serial[i].cubin, serial[i + 2].cubin) << "programs " << i << " and " << i + 2;
}

TEST(CompilePool, FailuresStayWithTheirRequest) {
  std::vector<CompileRequest> requests = eight_programs();
  requests.resize(3);
  requests[1].arch = "sm_70";                       // compile() throws
  requests[2].source = "this is not C++\n";         // compile() returns ok = false
  const std::vector<CompileOutcome> out = compile_parallel(requests, 0);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].ok()) << out[0].error_message();
  EXPECT_EQ(out[0].error_message(), "");
  EXPECT_FALSE(out[1].ok());
  ASSERT_TRUE(out[1].error);
  EXPECT_NE(out[1].error_message().find("sm_70"), std::string::npos) << out[1].error_message();
  EXPECT_FALSE(out[2].ok());
  EXPECT_FALSE(out[2].error);
  EXPECT_NE(out[2].error_message().find("prog2.cu(1)"), std::string::npos) << out[2].error_message();
}

TEST(CompilePool, NoRequestsNoOutcomes) { EXPECT_TRUE(compile_parallel({}, 3).empty()); }

}  // namespace
}  // namespace qattn::rt
