// qattn — the command-line tool. Exit codes: 0 ok, 1 failure, 2 bad input, 3 a GPU is needed and there
// is none. Errors are one line on stderr: what was wrong and what is accepted.
#include <cstdio>
#include <cstring>
#include <string>

#include "cache/log.hpp"
#include "cli/commands.hpp"
#include "qattn/error.hpp"

namespace {

const char* kUsage =
    "usage: qattn <command> [options]\n"
    "  doctor [--json]                                    driver, GPU, NVRTC, cache health (no GPU needed)\n"
    "  compile --spec S [--arch A] [--tiling T] [--emit source|ptx|cubin] [--out F]   (no GPU needed)\n"
    "  compile --grid default --arch sm_80,sm_89,sm_90a [--filter REGEX] [--jobs N] [--json]\n"
    "  run --spec S --shape b=1,hq=32,hkv=8,q=4096,kv=4096 [--layout bshd|bhsd] [--repeats N] [--no-tune]\n"
    "  tune --spec S --shape SHAPE\n"
    "  pretune [--grid default|FILE] [--devices all|0,2] [--db F] [--jobs N] [--kind all|prefill|decode] [--json] [--dry-run] [--print-grid]\n"
    "  report [--db F] [--out DIR] [--kind all|decode_dataflow|decode_splits]   decode decisions: table, SVG curves\n"
    "  cache list|stats|clear|verify [--db F] | export --db F --json OUT | import --json IN --db F | merge A B -o OUT | prune --db F [--keep-driver N] [--keep-toolchain T]\n"
    "  calibrate --spec-family F --layer KEY [--shape SHAPE | --inputs FILE] [--min-cos 0.999] [--max-rel-l1 0.05] [--force] [--json]\n"
    "common: --db F (cache file; default $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db), --no-cache\n"
    "exit codes: 0 ok, 1 failure, 2 bad input, 3 a GPU is needed and there is none\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  qattn::cache::report_trouble_on_stderr(true);   // a cache that cannot store is said once, not only under QATTN_LOG
  try {
    if (cmd == "doctor") return qattn::cli::doctor(argc, argv);
    if (cmd == "compile") return qattn::cli::compile(argc, argv);
    if (cmd == "run") return qattn::cli::run(argc, argv);
    if (cmd == "tune") return qattn::cli::tune(argc, argv);
    if (cmd == "pretune") return qattn::cli::pretune(argc, argv);
    if (cmd == "cache") return qattn::cli::cache(argc, argv);
    if (cmd == "calibrate") return qattn::cli::calibrate(argc, argv);
    if (cmd == "report") return qattn::cli::report(argc, argv);
    std::fprintf(stderr, "qattn: unknown command '%s'; accepted: doctor, compile, run, tune, pretune, cache, report, calibrate (see qattn --help)\n",
                 cmd.c_str());
    return 2;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn %s: %s\n", cmd.c_str(), e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
