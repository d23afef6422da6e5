// `qattn cache verify --recompile` on a small cache built here (NVRTC only, no GPU): a sound cache
// passes, a cubin replaced together with its digest (as an attacker with write access would) passes
// the digest check but not the rebuild, and a row of another toolchain is "not checkable", not a
// mismatch; a kernel NVRTC builds differently each time is not reported as tampered with. The tool runs
// as a user runs it (<build>/bin/qattn).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/digest.hpp"
#include "cache/keys.hpp"
#include "cache/maintenance.hpp"
#include "cache/sqlite.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/kernel_name.hpp"
#include "runtime/jit/compile_pool.hpp"
#include "tests/cli/run_cli.hpp"
#include "runtime/jit/recompile_check.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn {
namespace {

namespace fs = std::filesystem;
using cache::testing::TempDir;
using cli::testing::Outcome;
using cli::testing::run_cli;

const char* kPrefill = "qattn_prefill_sm80_qki8tok_pvf16_of16_d64__bm64_bn64_w4_s2";
const char* kDecode = "qattn_decode_sm90a_qki8tok_pvi8tok_of16_d64__bm16_bn32_w4_s3";

// A quantization pass whose tag carries a sampled mean ("channel_stats_s256"): the helper form whose
// name holds the most that the rebuild must read back.
gen::Source sampled_stats_pass() {
  gen::QuantRequest r;
  r.smooth = true;
  r.d = 64;
  gen::QuantProblem p;
  p.seq_len = p.seq_pad = 1024;
  p.mean_sample_tokens = 256;
  const gen::QuantPlan plan = gen::plan_quant(r, p);
  return gen::render_quant_pass(r, plan.launches.front(), Arch::sm_90a);
}

// Stores each source as the runtime does (rt::BinaryProvider): key over source, options, arch, toolchain.
void store_compiled(const std::string& db, const std::vector<gen::Source>& sources) {
  std::vector<rt::CompileRequest> requests;
  for (const gen::Source& s : sources) {
    rt::CompileRequest r;
    r.source = s.text;
    r.program_name = s.kernel_name + ".cu";
    r.arch = to_string(s.arch);
    r.extra_options = s.options;
    requests.push_back(r);
  }
  const auto outcomes = rt::compile_parallel(requests, 2);
  cache::Store store(db);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].error_message();
    cache::BinaryRecord rec;
    rec.kernel_name = sources[i].kernel_name;
    rec.arch = requests[i].arch;
    rec.toolchain = rt::toolchain_fingerprint();
    rec.key = cache::binary_key(sources[i].text, sources[i].options, rec.arch, rec.toolchain);
    rec.image = outcomes[i].result.cubin;
    store.put_binary(rec);
  }
}

// What someone with write access to the file can do: a new image and the digest that goes with it.
void replace_image(const std::string& db_path, const std::string& kernel_name, std::vector<unsigned char> image) {
  cache::Database db(db_path, cache::Database::Options{});
  cache::Statement update(db, "UPDATE kernel_binary SET image = ?1, image_size = ?2, image_sha256 = ?3 "
                              "WHERE kernel_name = ?4");
  update.bind_blob(1, image.data(), image.size())
      .bind(2, static_cast<long long>(image.size()))
      .bind(3, cache::sha256_hex(image.data(), image.size()))
      .bind(4, kernel_name);
  update.run();
  ASSERT_EQ(db.changes(), 1);
}

std::vector<unsigned char> stored_image(const std::string& db, const std::string& kernel_name) {
  for (const auto& b : cache::read_binaries(db))
    if (b.kernel_name == kernel_name) return b.image;
  return {};
}

class RecompileCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    db_ = dir_->file("small.db");
    // The attention kernels as the tool stores them; the helper as the runtime would (it stores
    // helpers only around a launch, which needs a GPU).
    for (const std::string args : {"--spec 'prefill qk=int8:per_token pv=fp16 out=fp16 d=64' --arch sm_80",
                                   "--spec 'decode qk=int8:per_token pv=int8:per_token out=fp16 d=64' --arch sm_90a"}) {
      const Outcome o = run_cli("compile " + args + " --db " + db_);
      ASSERT_EQ(o.code, 0) << o.out << o.err;
    }
    store_compiled(db_, {sampled_stats_pass()});
  }
  static void TearDownTestSuite() { delete dir_; }
  // A copy per test, so that one test's tampering is not another's input.
  std::string copy(const std::string& name) {
    const std::string path = dir_->file(name);
    fs::copy_file(db_, path, fs::copy_options::overwrite_existing);
    return path;
  }
  static TempDir* dir_;
  static std::string db_;
};
TempDir* RecompileCheck::dir_ = nullptr;
std::string RecompileCheck::db_;

// NVRTC gives the same bytes for the same source, options and library (for most kernels; see
// RecompileCheckUnsteady for one it does not): the rebuild compares cubins
// byte for byte, with nothing masked. The second compile's source has a trailing comment, so that no
// compile cache keyed on the text can answer it (NVRTC can serve a repeated compile from one, see
// rt::KernelUsage): it is compiled again, and a comment changes no byte of the cubin.
TEST(RecompileDeterminism, SameSourceTwiceGivesTheSameCubin) {
  const gen::Source s = sampled_stats_pass();
  rt::CompileRequest r;
  r.source = s.text;
  r.program_name = s.kernel_name + ".cu";
  r.arch = to_string(s.arch);
  r.extra_options = s.options;
  const rt::CompileResult a = rt::compile(r);
  r.source += "// compiled again\n";
  const rt::CompileResult b = rt::compile(r);
  ASSERT_TRUE(a.ok && b.ok) << a.log << b.log;
  EXPECT_FALSE(a.cubin.empty());
  EXPECT_EQ(a.cubin, b.cubin);
}

TEST(RecompileRebuild, EveryFamilyRendersBackUnderItsOwnName) {
  gen::Source out;
  std::string why;
  const Spec fq = parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128 paged arch=sm_90a");
  const Spec kv = parse_spec("decode qk=int4:per_token pv=int4:per_token out=fp16 d=64 paged arch=sm_80");
  std::vector<gen::Source> helpers = gen::render_flashq_kernels(fq);
  helpers.push_back(gen::render_kv_append(kv));
  helpers.push_back(gen::render_decode_combine(kv));
  helpers.push_back(gen::render_lse_rowdot(kv));
  helpers.push_back(gen::render_lse_addscaled(Arch::sm_80));
  helpers.push_back(sampled_stats_pass());
  // Every pass of a few plans: one pass ("_1p"), V transposed to fp8, packed int4 with rotation, Q block means.
  auto add_plan = [&](const gen::QuantRequest& r, int resident_blocks) {
    gen::QuantProblem p;
    p.seq_len = p.seq_pad = 1024;
    p.resident_blocks = resident_blocks;
    for (const auto& launch : gen::plan_quant(r, p).launches) helpers.push_back(gen::render_quant_pass(r, launch, Arch::sm_89));
  };
  gen::QuantRequest one_pass;
  one_pass.smooth = true;
  add_plan(one_pass, 1 << 20);
  gen::QuantRequest v;
  v.transpose = true, v.gran = Gran::per_channel, v.code = Fmt::fp8e4m3, v.in = Fmt::bf16;
  add_plan(v, 0);
  gen::QuantRequest packed;
  packed.pack4 = true, packed.qmax = 7, packed.rotate = quant::kRotateK, packed.gran = Gran::per_warp, packed.group = 64;
  add_plan(packed, 0);
  gen::QuantRequest q_mean;
  q_mean.block_mean = true, q_mean.gran = Gran::per_tensor, q_mean.d = 256;
  add_plan(q_mean, 0);
  std::string names;
  for (const gen::Source& s : helpers) names += s.kernel_name + " ";
  for (const char* form : {"__quantize_rows_1p ", "__channel_stats_s256 ", "_vt_d", "_rotk_", "_qmean_", "_i4pwrp"})
    EXPECT_NE(names.find(form), std::string::npos) << form << " is not among " << names;
  for (const gen::Source& s : helpers) {
    ASSERT_TRUE(rt::rebuild_source(s.kernel_name, to_string(s.arch), &out, &why)) << s.kernel_name << ": " << why;
    EXPECT_EQ(out.text, s.text) << s.kernel_name;
    EXPECT_EQ(out.options, s.options) << s.kernel_name;
  }
  EXPECT_FALSE(rt::rebuild_source("qattn_quant_f16_i8tok_d64__no_such_pass", "sm_80", &out, &why));
  EXPECT_FALSE(rt::rebuild_source(kPrefill, "sm_90a", &out, &why)) << "the name says sm80";
}

TEST_F(RecompileCheck, ASoundCachePassesAndJsonParses) {
  const std::string db = copy("sound.db");
  const Outcome o = run_cli("cache verify --db " + db + " --recompile --jobs 2");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("recompiled 3 binaries: 3 matched, 0 mismatched, 0 not checkable here"), std::string::npos)
      << o.out;

  const Outcome j = run_cli("cache verify --db " + db + " --recompile --jobs 2 --json --filter _prefill_");
  ASSERT_EQ(j.code, 0) << j.out << j.err;
  const nlohmann::json report = nlohmann::json::parse(j.out);
  EXPECT_TRUE(report.at("ok").get<bool>());
  const auto& r = report.at("recompile");
  EXPECT_EQ(r.at("checked"), 1);
  EXPECT_EQ(r.at("matched"), 1);
  EXPECT_EQ(r.at("filtered_out"), 2);
  EXPECT_EQ(r.at("binaries").at(0).at("kernel_name"), kPrefill);
  EXPECT_EQ(r.at("binaries").at(0).at("status"), "matched");
  EXPECT_EQ(r.at("toolchain"), rt::toolchain_fingerprint());
}

TEST_F(RecompileCheck, AReplacedCubinWithItsDigestPassesVerifyButNotRecompile) {
  const std::string db = copy("tampered.db");
  // Another kernel's valid cubin in place of the decode kernel's, digest updated: loadable, and wrong.
  replace_image(db, kDecode, stored_image(db, kPrefill));
  const Outcome plain = run_cli("cache verify --db " + db);
  EXPECT_EQ(plain.code, 0) << "the digests match, so the plain check cannot see it: " << plain.out;

  const Outcome o = run_cli("cache verify --db " + db + " --recompile --jobs 2");
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("MISMATCH " + std::string(kDecode)), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("MISMATCH " + std::string(kPrefill)), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("1 mismatched"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find(": ok\n"), std::string::npos) << o.out;

  const rt::RecompileReport r = rt::recompile_check(db, {2, ""});
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.checked, 3);
  EXPECT_EQ(r.matched, 2);
  ASSERT_EQ(r.mismatched, 1);
  for (const auto& e : r.entries) {
    if (e.status == rt::RecompileEntry::Status::mismatched) {
      EXPECT_EQ(e.kernel_name, kDecode);
    }
  }
}

TEST_F(RecompileCheck, RowsOfAnotherToolchainAreNotCheckableAndAStrangeNameIsAMismatch) {
  const std::string db = copy("other.db");
  const std::string old_toolchain = "nvrtc=12.4;qattn=0.0.1;templates=0123456789ab";
  {
    cache::Store store(db);
    cache::BinaryRecord rec;
    rec.kernel_name = kPrefill;
    rec.arch = "sm_80";
    rec.toolchain = old_toolchain;
    rec.key = cache::binary_key("old source", {}, rec.arch, rec.toolchain);
    rec.image = {1, 2, 3, 4};
    store.put_binary(rec);
  }
  Outcome o = run_cli("cache verify --db " + db + " --recompile --jobs 2");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("not checkable here (toolchain " + old_toolchain + ", current " + rt::toolchain_fingerprint() +
                       ")"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("4 binaries: 3 matched, 0 mismatched, 1 not checkable here"), std::string::npos) << o.out;

  // A row of this toolchain that this qattn cannot have made (no kernel has its name) is a mismatch.
  {
    cache::Store store(db);
    cache::BinaryRecord rec;
    rec.kernel_name = "qattn_backdoor";
    rec.arch = "sm_90a";
    rec.toolchain = rt::toolchain_fingerprint();
    rec.key = cache::binary_key("anything", {}, rec.arch, rec.toolchain);
    rec.image = stored_image(db, kDecode);
    store.put_binary(rec);
  }
  o = run_cli("cache verify --db " + db + " --recompile --jobs 2 --json");
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  const nlohmann::json r = nlohmann::json::parse(o.out).at("recompile");
  EXPECT_EQ(r.at("mismatched"), 1);
  EXPECT_EQ(r.at("not_checkable"), 1);
}

// The resources stored beside a binary are checked too where the rebuild knows them.
TEST_F(RecompileCheck, AChangedRegisterCountIsAMismatch) {
  const std::string db = copy("registers.db");
  {
    cache::Database file(db, cache::Database::Options{});
    cache::Statement update(file, "UPDATE kernel_binary SET registers = 7 WHERE kernel_name = ?1");
    update.bind(1, kPrefill);
    update.run();
    ASSERT_EQ(file.changes(), 1);
  }
  const rt::RecompileReport r = rt::recompile_check(db, {2, "_prefill_"});
  ASSERT_EQ(r.mismatched, 1);
  EXPECT_NE(r.entries.at(0).detail.find("registers"), std::string::npos) << r.entries.at(0).detail;
}

// NVRTC's cubin for FlashQ's GEMV decode kernel varies from one compile to the next (it depends on the
// compiling process's memory layout): a sound cache holding one must not be reported as tampered with.
// Its row is matched (a rebuild happened to give the stored bytes) or not checkable, never a mismatch.
TEST(RecompileCheckUnsteady, AKernelThatBuildsDifferentlyEachTimeIsNotAMismatch) {
  TempDir dir;
  const std::string db = dir.file("flashq.db");
  const Outcome c = run_cli("compile --spec 'decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 gqa=2 "
                            "flow=gemv' --arch sm_90a --db " + db);
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const rt::RecompileReport r = rt::recompile_check(db, {2, ""});
  ASSERT_EQ(r.checked, 1);
  EXPECT_EQ(r.mismatched, 0) << r.entries.at(0).detail;
  if (r.not_checkable == 1) {
    EXPECT_NE(r.entries.at(0).detail.find("two builds of its source here differ"), std::string::npos)
        << r.entries.at(0).detail;
  }
  std::printf("[ recompile ] FlashQ GEMV kernel: %s %s\n", rt::to_string(r.entries.at(0).status),
              r.entries.at(0).detail.c_str());
}

TEST_F(RecompileCheck, BadOptionsAreRefused) {
  const std::string db = copy("opts.db");
  Outcome o = run_cli("cache verify --db " + db + " --jobs 2");
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  o = run_cli("cache verify --db " + db + " --recompile --filter '('");
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  o = run_cli("cache verify --db " + db + " --recompile --filter " + std::string(300, 'a'));
  EXPECT_EQ(o.code, 2) << o.out << o.err;
}

}  // namespace
}  // namespace qattn
