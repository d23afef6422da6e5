// Inspect a cache file without a GPU: its layout version, the tuned winners per (spec, bucket, device)
// and the decode decisions (inflection points and split tables), as `qattn cache list` and `qattn
// report` print them. Opens the file read-only; never modifies it.
// Usage: qattn_example_06_inspect_cache CACHE.db
#include <cstdio>

#include "cache/store.hpp"
#include "qattn/inflection.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CACHE.db\n", argv[0]);
    return 2;
  }
  try {
    qattn::cache::Store::Options o;
    o.read_only = true;
    qattn::cache::Store store(argv[1], o);
    const auto s = store.stats();
    std::printf("%s: schema v%d, %lld cubins (%lld bytes), %lld tuned winners, %lld decisions\n", argv[1],
                s.schema_version, s.binary_count, s.binary_bytes, s.tuned_count, s.decision_count);
    for (const auto& r : store.list_tuned())
      std::printf("  tuned  %-80s %-22s %8.1f us  %s\n", r.spec.c_str(), r.bucket.c_str(), r.time_us, r.kernel_name.c_str());
    for (const auto& d : store.list_decisions()) {
      std::printf("  decision %s %s on %s\n", d.kind.c_str(), d.key.c_str(), d.device.name.c_str());
      if (d.kind == qattn::kDecodeDataflowKind) {
        const qattn::InflectionTable t = qattn::parse_inflection_table(d.json);
        std::printf("%s", qattn::report_text(&t, nullptr).c_str());
      } else if (d.kind == qattn::kDecodeSplitsKind) {
        const qattn::SplitTable t = qattn::parse_split_table(d.json);
        std::printf("%s", qattn::report_text(nullptr, &t).c_str());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_example_06_inspect_cache: %s\n", e.what());
    return 1;
  }
}
