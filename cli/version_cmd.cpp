// qattn version (also `qattn --version`): which qattn this is, for bug reports and cache questions.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cache/schema.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "cli_git_commit.hpp"   // generated at build time by cli/git_commit.cmake
#include "generator/embedded_templates.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"

namespace qattn::cli {
namespace {

int version(const Args& args) {
  nlohmann::json j;
  j["qattn"] = QATTN_VERSION;
  j["git_commit"] = QATTN_GIT_COMMIT;
  j["nvrtc"] = rt::nvrtc_version();
  j["cache_schema_version"] = cache::kSchemaVersion;
  j["cache_compatible_version"] = cache::kCompatibleVersion;
  j["templates_digest"] = gen::embedded_templates_digest();
  if (args.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("qattn %s (commit %s)\nNVRTC %s\ncache schema %d (readable by qattn builds of schema >= %d)\n"
              "templates %.12s\n",
              QATTN_VERSION, QATTN_GIT_COMMIT, j["nvrtc"].get<std::string>().c_str(), cache::kSchemaVersion,
              cache::kCompatibleVersion, gen::embedded_templates_digest());
  return 0;
}

}  // namespace

const Verb& version_verb() {
  static const Verb verb{
      "version",
      "the qattn, NVRTC and cache schema versions and the git commit (also: qattn --version)",
      {"version [--json]", "--version [--json]"},
      "Prints the library version, the git commit it was built from (\"unknown\" when built outside a git "
      "checkout; \"-dirty\" when tracked files had changes), the NVRTC version it compiles with, the cache "
      "schema version it writes, and the digest of the kernel templates built into it. No GPU needed.",
      {json_option("the versions")},
      {{"qattn version", "four lines of versions (qattn --version prints the same)"},
       {"qattn version --json", "the same as JSON"}},
      0,
      {},
      version};
  return verb;
}

}  // namespace qattn::cli
