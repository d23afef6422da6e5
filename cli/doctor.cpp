// qattn doctor: what this machine can do. Exit 0 with or without a GPU.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "generator/embedded_templates.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"

namespace qattn::cli {

namespace {

int doctor(const Args& args) {
  nlohmann::json j;
  j["qattn"] = QATTN_VERSION;
  j["nvrtc"] = rt::nvrtc_version();
  j["templates_digest"] = gen::embedded_templates_digest();
  std::string why;
  const bool have_driver = rt::driver_available(&why);
  j["driver"]["available"] = have_driver;
  if (!have_driver) j["driver"]["reason"] = why;
  j["devices"] = nlohmann::json::array();
  if (have_driver) {
    j["driver"]["version"] = rt::driver_version();
    const int n = rt::device_count();
    for (int i = 0; i < n; ++i) {
      const rt::DeviceInfo d = rt::query_device(i);
      std::string arch;
      try {
        arch = rt::arch_for(d);
      } catch (const std::exception& e) {
        arch = std::string("unsupported: ") + e.what();
      }
      j["devices"].push_back({{"ordinal", i}, {"name", d.name}, {"cc", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                              {"sms", d.sm_count}, {"arch", arch}, {"smem_optin", d.max_smem_per_block_optin},
                              {"l2_bytes", d.l2_bytes}, {"memory_bytes", d.total_mem_bytes}});
    }
  }
  const std::string db = args.get("db", cache::default_cache_path());
  j["cache"]["path"] = db;
  try {
    cache::Store store(db);
    const cache::Store::Stats s = store.stats();
    j["cache"]["healthy"] = true;
    j["cache"]["schema_version"] = s.schema_version;
    j["cache"]["journal_mode"] = s.journal_mode;
    j["cache"]["binaries"] = s.binary_count;
    j["cache"]["tuned"] = s.tuned_count;
    j["cache"]["file_bytes"] = s.file_bytes;
  } catch (const std::exception& e) {
    j["cache"]["healthy"] = false;
    j["cache"]["error"] = e.what();
  }
  if (args.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("qattn %s   NVRTC %s   templates %.12s\n", QATTN_VERSION, rt::nvrtc_version().c_str(),
              gen::embedded_templates_digest());
  if (have_driver) {
    std::printf("driver: CUDA %d   devices: %zu\n", rt::driver_version(), j["devices"].size());
    for (const auto& d : j["devices"])
      std::printf("  [%d] %s  cc %s  %d SMs  arch %s\n", d["ordinal"].get<int>(), d["name"].get<std::string>().c_str(),
                  d["cc"].get<std::string>().c_str(), d["sms"].get<int>(), d["arch"].get<std::string>().c_str());
  } else {
    std::printf("driver: none (%s)\n  compile-only mode: generation, NVRTC compilation and caching work; launches need a GPU\n",
                why.c_str());
  }
  if (j["cache"]["healthy"].get<bool>())
    std::printf("cache: %s  (schema %d, %s, %lld binaries, %lld tuned)\n", db.c_str(),
                j["cache"]["schema_version"].get<int>(), j["cache"]["journal_mode"].get<std::string>().c_str(),
                j["cache"]["binaries"].get<long long>(), j["cache"]["tuned"].get<long long>());
  else
    std::printf("cache: %s  UNHEALTHY: %s\n", db.c_str(), j["cache"]["error"].get<std::string>().c_str());
  return 0;
}

}  // namespace

const Verb& doctor_verb() {
  static const Verb verb{
      "doctor",
      "what this machine can do: driver, GPUs, NVRTC, cache health (no GPU needed)",
      {"doctor [--db FILE] [--json]"},
      "Reports the qattn and NVRTC versions, the CUDA driver and every visible GPU with the arch qattn "
      "compiles for it, and whether the kernel cache opens. Without a driver it says so and still exits 0: "
      "compiling and caching work without a GPU, launching does not.",
      {db_option(), json_option("the report")},
      {{"qattn doctor", "one screen: versions, devices, cache"},
       {"qattn doctor --json --db /tmp/q.db", "the same as JSON, for another cache file"}},
      0,
      {},
      doctor};
  return verb;
}

}  // namespace qattn::cli
