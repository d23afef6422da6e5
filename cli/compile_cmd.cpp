// qattn compile: one spec (optionally emitting source / PTX / cubin) or a whole grid; no GPU needed.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/verbs.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "generator/search_space.hpp"
#include "generator/spec_space.hpp"

namespace qattn::cli {
namespace {

std::vector<Arch> parse_archs(const std::string& list) {
  std::vector<Arch> archs;
  for (const std::string& a : gen::text::split(list, ",")) archs.push_back(parse_arch(a));
  return archs;
}

struct Row {
  std::string name, arch, error;
  int registers = -1, spills = -1, smem = 0;
  double ms = 0;
  bool cached = false, serialized = false;
};

// std::regex compiles and matches by recursion: a long or deeply nested pattern overflows the stack
// (a segmentation fault, not an exception). Kernel names are short, so small limits lose nothing.
constexpr size_t kMaxFilterLength = 256;
constexpr int kMaxFilterNesting = 16;

std::regex parse_filter(const std::string& pattern) {
  const std::string accepted = "; accepted: an ECMAScript regex of at most " + std::to_string(kMaxFilterLength) +
                               " characters with groups nested at most " + std::to_string(kMaxFilterNesting) + " deep";
  if (pattern.size() > kMaxFilterLength)
    throw_bad_input("--filter is " + std::to_string(pattern.size()) + " characters long" + accepted);
  int depth = 0, deepest = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') { ++i; continue; }             // an escaped character is a literal
    if (in_class) { in_class = c != ']'; continue; }
    if (c == '[') in_class = true;
    else if (c == '(') deepest = std::max(deepest, ++depth);
    else if (c == ')' && depth > 0) --depth;
  }
  if (deepest > kMaxFilterNesting)
    throw_bad_input("--filter nests groups " + std::to_string(deepest) + " deep" + accepted);
  try {
    return std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw_bad_input("--filter '" + pattern + "' is not a valid regex (" + e.what() + ")" + accepted);
  }
}

// Options that belong to the other mode are refused rather than ignored.
void refuse_options(const Args& args, const std::vector<std::string>& names, const std::string& why) {
  for (const std::string& n : names)
    if (args.has(n)) throw_bad_input("--" + n + " " + why + " (see qattn compile --help)");
}

// --grid default: the built-in grid's specs. --grid space: every spec validate() accepts, one point per
// distinct kernel (generator/spec_space.hpp), optionally a seeded sample of them.
std::vector<std::pair<Spec, Tiling>> grid_points(const Args& args, const std::string& grid) {
  const std::regex filter = parse_filter(args.get("filter", ".*"));
  std::vector<std::pair<Spec, Tiling>> points;
  if (grid == "default") {
    for (Arch a : parse_archs(args.get("arch", "sm_80,sm_89,sm_90a")))
      for (const Spec& s : gen::default_grid(a)) {
        const Tiling t = default_tiling(s, default_limits(a));
        if (std::regex_search(kernel_name(s, t), filter)) points.emplace_back(s, t);
      }
    return points;
  }
  std::vector<gen::SpacePoint> kernels;
  for (Arch a : parse_archs(args.get("arch", "sm_80,sm_86,sm_89,sm_90,sm_90a")))
    for (Phase phase : {Phase::prefill, Phase::decode, Phase::linear})
      for (const gen::SpacePoint& p : gen::distinct_default_kernels(gen::accepted_specs(phase, a)))
        if (std::regex_search(p.kernel, filter)) kernels.push_back(p);
  if (args.has("sample"))
    kernels = gen::sample_points(kernels, static_cast<size_t>(args.get_int("sample", 0, 1, 1000000)),
                                 static_cast<uint64_t>(args.get_int("seed", 1, 0, 2147483647)));
  for (const gen::SpacePoint& p : kernels) points.emplace_back(p.spec, p.tiling);
  return points;
}

int compile_grid(const Args& args) {
  const std::string grid = args.get("grid");
  if (grid != "default" && grid != "space") throw_bad_input("--grid " + grid + " is unknown; accepted: default, space");
  if (grid == "default") refuse_options(args, {"sample", "seed", "repair"}, "applies to --grid space only");
  if (args.has("repair") && args.has("json")) throw_bad_input("--repair prints table rows: leave out --json");
  if (args.has("seed") && !args.has("sample")) throw_bad_input("--seed picks the --sample draw: give --sample N too");
  // Numbers are checked before the space is enumerated (tens of seconds), not after.
  const int jobs = args.get_int("jobs", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1, 256);
  if (args.has("sample")) (void)args.get_int("sample", 0, 1, 1000000);
  if (args.has("seed")) (void)args.get_int("seed", 1, 0, 2147483647);
  const bool fail_on_spills = grid == "space";   // the spill sweep: a spilling default tiling is a defect
  const std::vector<std::pair<Spec, Tiling>> points = grid_points(args, grid);
  Runtime runtime(runtime_options(args));
  std::vector<Row> rows(points.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < jobs; ++w)
    workers.emplace_back([&] {
      for (size_t i = next++; i < points.size(); i = next++) {
        Row& r = rows[i];
        r.name = kernel_name(points[i].first, points[i].second);
        r.arch = to_string(points[i].first.arch);
        try {
          const CompiledKernel k = runtime.compile(points[i].first, points[i].second);
          r.registers = k.registers;
          r.spills = k.spill_bytes;
          r.smem = k.smem_bytes;
          r.ms = k.compile_ms;
          r.cached = k.from_cache;
          r.serialized = k.wgmma_serialized;
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      }
    });
  for (auto& t : workers) t.join();
  // --repair: for each spilling kernel, the first later candidate of its spec that does not spill, as a
  // line of generator/spill_promotions.inc (a row of the table preferred() reads).
  std::vector<std::string> repairs;
  if (args.has("repair"))
    for (size_t i = 0; i < points.size(); ++i) {
      if (rows[i].spills <= 0) continue;
      const Spec& spec = points[i].first;
      std::string found = "none of its candidates compiles without spilling";
      for (const Tiling& t : gen::candidate_tilings(spec, default_limits(spec.arch))) {
        if (t == points[i].second) continue;
        try {
          if (runtime.compile(spec, t).spill_bytes == 0) {
            found = to_string(t);
            break;
          }
        } catch (const std::exception&) {   // a candidate that does not compile is no default either
        }
      }
      // A row for every accepted spec that shares the kernel under another name (e.g. gqa 16 with gqa 8's
      // GEMV rows), so that each of them leaves it.
      const std::string code = gen::kernel_code(spec, points[i].second);
      std::vector<std::string> stems{spec_name(spec)};
      for (const Spec& other : gen::accepted_specs(spec.phase, spec.arch)) {
        const Tiling t = default_tiling(other, default_limits(other.arch));
        if (!(t == points[i].second) || gen::kernel_code(other, t) != code) continue;
        const std::string stem = spec_name(other);
        if (std::find(stems.begin(), stems.end(), stem) == stems.end()) stems.push_back(stem);
      }
      for (const std::string& stem : stems)
        repairs.push_back("{\"" + stem + "\", \"" + found + "\", \"" + to_string(points[i].second) + "\"},   // " +
                          std::to_string(rows[i].spills) + " bytes");
    }
  int failures = 0, spilled = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    failures += !r.error.empty();
    spilled += r.spills > 0;
    out.push_back({{"kernel", r.name}, {"arch", r.arch}, {"registers", r.registers}, {"spill_bytes", r.spills},
                   {"smem_bytes", r.smem}, {"compile_ms", r.ms}, {"cached", r.cached},
                   {"wgmma_serialized", r.serialized}, {"ok", r.error.empty()},
                   {"error", r.error}});
  }
  if (args.has("json")) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%-86s %-7s %5s %6s %7s %9s %s\n", "kernel", "arch", "regs", "spills", "smem", "compile", "");
    for (const Row& r : rows) {
      std::string note = r.cached ? "cached" : "";
      if (r.serialized) note += std::string(note.empty() ? "" : ", ") + "wgmma serialized";
      if (!r.error.empty()) note = "FAILED: " + r.error.substr(0, 200);
      std::printf("%-86s %-7s %5d %6d %7d %7.0fms %s\n", r.name.c_str(), r.arch.c_str(), r.registers, r.spills, r.smem,
                  r.ms, note.c_str());
    }
    std::printf("%zu kernels, %d failed, %d spilled\n", rows.size(), failures, spilled);
    for (const std::string& line : repairs) std::printf("repair: %s\n", line.c_str());
  }
  return failures || (fail_on_spills && spilled) ? 1 : 0;
}

int compile_one(const Args& args) {
  refuse_options(args, {"filter", "jobs", "sample", "seed", "repair"}, "applies to --grid only");
  Spec spec = parse_spec(args.require("spec", "<spec text>, e.g. --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=128'"));
  if (args.has("arch")) spec.arch = parse_arch(args.get("arch"));
  if (spec.arch == Arch::unset) throw_bad_input("compile needs an arch: --arch sm_80|sm_86|sm_89|sm_90|sm_90a or arch= in the spec");
  require(validate(spec));
  const Tiling tiling = args.has("tiling") ? parse_tiling(args.get("tiling")) : default_tiling(spec, default_limits(spec.arch));
  const std::string emit = args.get("emit", "");
  if (!emit.empty() && emit != "source" && emit != "ptx" && emit != "cubin")
    throw_bad_input("--emit " + emit + " is unknown; accepted: source, ptx, cubin");
  if (emit == "cubin" && !args.has("out")) throw_bad_input("--emit cubin writes binary data: give --out FILE");
  if (!emit.empty() && args.has("json") && !args.has("out"))
    throw_bad_input("--json prints the report on stdout, where --emit " + emit + " writes its payload: give --out FILE");
  if (args.has("out") && emit.empty()) throw_bad_input("--out names the file --emit writes: give --emit source|ptx|cubin too");
  Runtime runtime(runtime_options(args));
  const CompiledKernel k = runtime.compile(spec, tiling, emit == "ptx");
  std::string payload;
  if (emit == "source") payload = k.source;
  if (emit == "ptx") payload = k.ptx;
  if (emit == "cubin") payload.assign(k.cubin.begin(), k.cubin.end());
  if (!emit.empty() && args.has("out")) write_file_atomically(args.get("out"), payload);
  else if (!emit.empty()) std::fwrite(payload.data(), 1, payload.size(), stdout);
  std::vector<std::string> notes;
  if (k.wgmma_serialized)
    notes.push_back("ptxas serialized the wgmma pipeline (its C75xx line in the log): correct, possibly slower");
  // How the spec runs when its text does not say it (e.g. qk=int4 as int8 compute on sm_90a).
  if (const std::string note = dispatch_note(spec, tiling); !note.empty()) notes.push_back(note);
  // Without --emit, storing the kernel in the cache is the point: trouble with the user cache (already
  // said once on stderr) makes it a failure.
  const std::string trouble = runtime.cache_status();
  const bool store_failed = emit.empty() && !runtime.cache_path().empty() &&
                            trouble.rfind("qattn cache: " + runtime.cache_path() + ":", 0) == 0;
  if (args.has("json")) {
    nlohmann::json j = {{"kernel", k.kernel_name}, {"arch", to_string(spec.arch)}, {"tiling", to_string(tiling)},
                        {"registers", k.registers}, {"spill_bytes", k.spill_bytes}, {"smem_bytes", k.smem_bytes},
                        {"compile_ms", k.compile_ms}, {"cached", k.from_cache}, {"wgmma_serialized", k.wgmma_serialized},
                        {"cubin_bytes", k.cubin.size()}, {"notes", notes}};
    j["out"] = args.has("out") ? nlohmann::json(args.get("out")) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
    return store_failed ? 1 : 0;
  }
  // The report goes to stdout unless the payload does (then to stderr, to keep the payload clean).
  FILE* report = emit.empty() || args.has("out") ? stdout : stderr;
  std::fprintf(report,
               "%s  regs %d  spills %d  smem %d  %s %.0f ms  (%zu bytes of cubin)\n", k.kernel_name.c_str(), k.registers,
               k.spill_bytes, k.smem_bytes, k.from_cache ? "cached, compiled in" : "compiled in", k.compile_ms, k.cubin.size());
  for (const std::string& note : notes) std::fprintf(report, "note: %s\n", note.c_str());
  return store_failed ? 1 : 0;
}

int compile(const Args& args) {
  if (args.has("grid")) {
    refuse_options(args, {"spec", "tiling", "emit", "out"}, "does not go with --grid, which compiles the built-in grid");
    return compile_grid(args);
  }
  return compile_one(args);
}

}  // namespace

const Verb& compile_verb() {
  static const Verb verb{
      "compile",
      "render and NVRTC-compile one spec, the default grid or the whole accepted space (no GPU needed)",
      {"compile --spec S [--arch A] [--tiling T] [--emit source|ptx|cubin [--out FILE]] [--db FILE | --no-cache] [--json]",
       "compile --grid default [--arch A,A,...] [--filter REGEX] [--jobs N] [--db FILE | --no-cache] [--json]",
       "compile --grid space [--arch A,A,...] [--filter REGEX] [--sample N [--seed S]] [--repair] [--jobs N] [--db FILE | --no-cache] [--json]"},
      "With --spec: renders the kernel of one spec and tiling, compiles it with NVRTC and stores the binary in "
      "the cache (a second compile of the same kernel is a cache hit). Prints one line: kernel name, registers, "
      "spilled bytes, shared memory, compile time. With --emit the source, PTX or cubin is written to --out (or "
      "to stdout; the report then goes to stderr).\n\n"
      "With --grid default: compiles every spec of the built-in grid for each arch in parallel and prints one "
      "row per kernel; exit 1 when any failed.\n\n"
      "With --grid space (the spill sweep): every spec that validate() accepts, for each arch and every phase (prefill, decode, linear), "
      "reduced to one point per distinct kernel of its default tiling, compiled in parallel, one row per kernel; "
      "exit 1 when any failed or spilled registers to local memory. It takes hours on a few cores for every "
      "arch: --arch, --filter and --sample narrow it. No mode needs a GPU.",
      {{"spec", "S", "the spec text, e.g. 'prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal'"},
       {"arch", "A", "target: sm_80, sm_86, sm_89, sm_90 or sm_90a (with --spec: overrides arch= in the spec; with "
                     "--grid: a comma list, default sm_80,sm_89,sm_90a for default, all five for space)"},
       {"tiling", "T", "tiling instead of the spec's default, e.g. bm128_bn64_w4_s2 or bm64_bn128_w4_s3_wg"},
       {"emit", "WHAT", "also output the kernel: source (CUDA C++), ptx, or cubin (needs --out)"},
       {"out", "FILE", "the file --emit writes (written whole or not at all)"},
       {"grid", "NAME", "compile a grid instead of one spec; accepted: default (the built-in grid), space (every accepted spec)"},
       {"filter", "REGEX", "with --grid: only kernels whose name matches (ECMAScript regex, searched; at most 256 characters, groups nested at most 16 deep)"},
       {"jobs", "N", "with --grid: compile threads, 1..256 (default: one per CPU core)"},
       {"sample", "N", "with --grid space: only N kernels, drawn without replacement after --filter, 1..1000000"},
       {"seed", "S", "with --sample: the draw's seed, 0..2147483647 (default 1; the same seed draws the same kernels)"},
       {"repair", "", "with --grid space: for each spilling kernel, compile its spec's later candidates and print the "
                      "first that does not spill as a row of generator/spill_promotions.inc ('repair: ...')"},
       db_option(),
       no_cache_option(),
       json_option("the report (with --grid: an array of rows)")},
      {{"qattn compile --spec 'prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 causal' --arch sm_90a",
        "compile one kernel for H100 and print its registers, spills and shared memory"},
       {"qattn compile --spec 'prefill qk=fp16 pv=fp16 out=fp16 d=64' --arch sm_80 --emit source --out k.cu --no-cache",
        "write the rendered CUDA source to k.cu without touching the cache"},
       {"qattn compile --grid space --arch sm_80 --filter '^qattn_prefill' --no-cache",
        "the spill sweep of every accepted sm_80 prefill kernel: exit 1 if any spills"}},
      0,
      {},
      compile};
  return verb;
}

}  // namespace qattn::cli
