// Pretune on the CPU: grid parsing and expansion, the scheduler driven by fake workers (counts, resume,
// failures, cancellation, device classes) and the progress display.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "qattn/error.hpp"
#include "qattn/pretune.hpp"
#include "generator/search_space.hpp"
#include "qattn/tuner.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

const char* kInt8 = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv";
const char* kFp16 = "prefill qk=fp16 pv=fp16 out=fp16 d=64";
const char* kDecode = "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4";

std::string grid_with(const nlohmann::json& entries) {
  return nlohmann::json{{"version", 1}, {"entries", entries}}.dump();
}

// ---- Grid ----------------------------------------------------------------------------------------------

TEST(PretuneGrid, ParsesSpecsProblemsAndDefaults) {
  const PretuneGrid g = parse_pretune_grid(grid_with({
      {{"spec", kInt8}, {"problems", {{"heads_q", 32}, {"q_len", {1024, 4096}}}}},
      {{"description", "free text"}, {"kind", "decode"}, {"spec", kDecode}, {"problems", {{"q_len", 1}, {"kv_len", {4096, 65536}}}}}}));
  ASSERT_EQ(g.entries.size(), 2u);
  // Entry 0: heads_kv defaults to heads_q / gqa, kv_len to q_len, batch to 1.
  EXPECT_EQ(g.entries[0].kind, Phase::prefill);
  ASSERT_EQ(g.entries[0].specs.size(), 1u);
  EXPECT_EQ(to_string(g.entries[0].specs[0]), kInt8);
  ASSERT_EQ(g.entries[0].problems.size(), 1u);
  ASSERT_EQ(g.entries[0].problems[0].size(), 2u);
  EXPECT_EQ(g.entries[0].problems[0][1], (Problem{1, 32, 8, 4096, 4096}));
  // Entry 1: heads_q defaults to 32.
  EXPECT_EQ(g.entries[1].kind, Phase::decode);
  ASSERT_EQ(g.entries[1].problems[0].size(), 2u);
  EXPECT_EQ(g.entries[1].problems[0][0], (Problem{1, 32, 8, 1, 4096}));
}

TEST(PretuneGrid, EveryCombinationOfTheLists) {
  const PretuneGrid g = parse_pretune_grid(grid_with({{{"specs", {kFp16, "prefill qk=bf16 pv=bf16 out=bf16 d=128"}},
                                                       {"problems", {{"batch", {1, 2}}, {"heads_q", {8}}, {"q_len", 512},
                                                                     {"kv_len", {512, 2048}}}}}}));
  ASSERT_EQ(g.entries[0].specs.size(), 2u);
  ASSERT_EQ(g.entries[0].problems[1].size(), 4u);   // 2 batches x 1 q x 2 kv
  EXPECT_EQ(g.entries[0].problems[1][3], (Problem{2, 8, 8, 512, 2048}));
}

struct Malformed {
  std::string document;
  std::string expected;   // a part of the message
};

TEST(PretuneGrid, EveryMalformedDocumentIsOneLineBadInput) {
  auto entry = [](nlohmann::json e) { return grid_with(nlohmann::json::array({e})); };
  const nlohmann::json ok_problems = {{"q_len", {1024}}};
  const std::vector<Malformed> cases = {
      {"{", "not valid JSON"},
      {"[1]", "top level: expected an object"},
      {R"({"entries":[]})", "version: missing"},
      {R"({"version":2,"entries":[]})", "version: 2 is not supported; accepted: 1"},
      {R"({"version":1})", "entries: expected a non-empty list"},
      {R"({"version":1,"entries":[]})", "entries: expected a non-empty list"},
      {R"({"version":1,"entries":{}})", "entries: expected a non-empty list"},
      {R"({"version":1,"entries":[],"extra":1})", "top level: unknown field 'extra'"},
      {grid_with({7}), "entries[0]: expected an object"},
      {entry({{"problems", ok_problems}}), "entries[0]: give exactly one of spec"},
      {entry({{"spec", kInt8}, {"specs", {kInt8}}, {"problems", ok_problems}}), "entries[0]: give exactly one of spec"},
      {entry({{"spec", kInt8}, {"problem", ok_problems}}), "entries[0]: unknown field 'problem'"},
      {entry({{"spec", 5}, {"problems", ok_problems}}), "entries[0].spec: expected a spec text"},
      {entry({{"spec", "prefill qk=int9 pv=fp16 out=fp16 d=128"}, {"problems", ok_problems}}), "entries[0].spec: "},
      {entry({{"specs", nlohmann::json::array()}, {"problems", ok_problems}}), "entries[0].specs: expected a non-empty list"},
      {entry({{"specs", {kFp16, 3}}, {"problems", ok_problems}}), "entries[0].specs[1]: expected a spec text"},
      {entry({{"spec", std::string(kFp16) + " arch=sm_90a"}, {"problems", ok_problems}}), "entries[0].spec: leave arch= out"},
      {entry({{"spec", "prefill qk=fp16 pv=fp16 out=fp16 d=80"}, {"problems", ok_problems}}), "entries[0].spec: d=80"},
      {entry({{"spec", std::string(kDecode) + " flow=gemv"}, {"kind", "decode"}, {"problems", {{"q_len", 1}, {"kv_len", {64}}}}}),
       "entries[0].spec: a decode entry's flow= and splitk="},
      {entry({{"spec", kFp16}, {"kind", "train"}, {"problems", ok_problems}}), "entries[0].kind: expected \"prefill\", \"decode\" or \"linear\""},
      {entry({{"spec", kFp16}, {"kind", "decode"}, {"problems", ok_problems}}), "entries[0].spec: is a prefill spec in a decode entry"},
      {entry({{"spec", kFp16}}), "entries[0].problems: missing"},
      {entry({{"spec", kFp16}, {"problems", {1024}}}), "entries[0].problems: expected an object"},
      {entry({{"spec", kFp16}, {"problems", {{"q", {1024}}}}}), "entries[0].problems: unknown field 'q'"},
      {entry({{"spec", kFp16}, {"problems", {{"batch", {1}}}}}), "entries[0].problems.q_len: missing"},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", nlohmann::json::array()}}}}), "entries[0].problems.q_len: expected an integer"},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", "4k"}}}}), "entries[0].problems.q_len: expected an integer in [1, 4194304] or a non-empty list of them, got \"4k\""},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", {1024, -1}}}}}), "entries[0].problems.q_len: expected an integer"},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", {1.5}}}}}), "entries[0].problems.q_len: expected an integer"},
      {entry({{"spec", kFp16}, {"problems", {{"batch", 0}, {"q_len", 8}}}}), "entries[0].problems.batch: expected an integer in [1, 65536]"},
      {entry({{"spec", kFp16}, {"problems", {{"heads_q", {2000}}, {"q_len", 8}}}}), "entries[0].problems.heads_q: expected an integer in [1, 1024]"},
      {entry({{"spec", kFp16}, {"problems", {{"heads_kv", "x"}, {"q_len", 8}}}}), "entries[0].problems.heads_kv: expected an integer"},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", 8}, {"kv_len", "double"}}}}), "entries[0].problems.kv_len: expected \"same\""},
      {entry({{"spec", kFp16}, {"problems", {{"q_len", 8}, {"kv_len", {true}}}}}), "entries[0].problems.kv_len: expected an integer"},
      {entry({{"spec", kInt8}, {"problems", {{"heads_q", 30}, {"q_len", 8}}}}), "entries[0].problems.heads_q: 30 is not a multiple of gqa=4"},
      {entry({{"spec", kInt8}, {"problems", {{"heads_q", 32}, {"heads_kv", 32}, {"q_len", 8}}}}), "entries[0].problems: 'prefill qk=int8"},
      {entry({{"spec", kDecode}, {"problems", {{"q_len", 1}}}}), "entries[0].problems.kv_len: a decode entry needs"},
      {entry({{"spec", kDecode}, {"problems", {{"q_len", 100}, {"kv_len", {4096}}}}}), "decode takes 1..64 new tokens"},
      {entry({{"spec", kFp16}, {"problems", {{"batch", {1, 2, 3, 4, 5, 6, 7, 8}}, {"heads_q", {1, 2, 4, 8, 16, 32, 64, 128}},
                                           {"q_len", {1, 2, 3, 4, 5, 6, 7, 8}}, {"kv_len", {1, 2, 3, 4, 5, 6, 7, 8, 9}}}}}),
       "more than 4096 problems"},
      {grid_with({{{"spec", kFp16}, {"problems", ok_problems}}, {{"spec", kFp16}, {"problems", {{"q_len", 0}}}}}),
       "entries[1].problems.q_len"},
  };
  for (const Malformed& c : cases) {
    try {
      parse_pretune_grid(c.document, "grid t.json");
      ADD_FAILURE() << "accepted: " << c.document;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::bad_input) << msg;
      EXPECT_EQ(msg.rfind("grid t.json: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(PretuneGrid, MissingFileIsBadInput) {
  try {
    load_pretune_grid("/nonexistent/grid.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("cannot read"), std::string::npos);
  }
}

TEST(PretuneGrid, ExampleLlamaGridParses) {
  const PretuneGrid g = load_pretune_grid(QATTN_SOURCE_DIR "/examples/grids/llama3_8b.json");
  const std::vector<PretuneItem> items = expand_grid(g);
  EXPECT_GT(items.size(), 5u);
  size_t linear = 0;
  for (const PretuneItem& it : items) {
    if (it.kind == Phase::linear) {
      ++linear;
      EXPECT_EQ(it.rows.size(), 21u) << it.key();
      continue;
    }
    EXPECT_EQ(it.spec.gqa, 4) << it.key();
  }
  EXPECT_EQ(linear, 12u);   // four layer shapes x three weight formats
}

// ---- Expansion -------------------------------------------------------------------------------------------

TEST(PretuneExpand, OneItemPerSpecAndBucketWithTheRepresentative) {
  // 1000 and 1024 share bucket q1024; the second entry repeats (kInt8, q4096) and adds a gqa-1 spec.
  const PretuneGrid g = parse_pretune_grid(grid_with({
      {{"spec", kInt8}, {"problems", {{"batch", 3}, {"heads_q", 32}, {"q_len", {1000, 1024, 4096}}}}},
      {{"spec", kInt8}, {"problems", {{"batch", 3}, {"heads_q", 32}, {"q_len", 4096}}}},
      {{"spec", kFp16}, {"problems", {{"heads_q", 8}, {"q_len", 4096}, {"kv_len", {4000}}}}}}));
  const std::vector<PretuneItem> items = expand_grid(g);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].key(), std::string(kInt8) + "|q1024_kv1024_bh128");
  EXPECT_EQ(items[1].key(), std::string(kInt8) + "|q4096_kv4096_bh128");
  EXPECT_EQ(items[2].key(), std::string(kFp16) + "|q4096_kv4096_bh8");
  // The representative: the bucket's sizes, the first problem's heads, batch = bh / heads_q.
  EXPECT_EQ(items[0].problem, (Problem{4, 32, 8, 1024, 1024}));
  EXPECT_EQ(items[2].problem, (Problem{1, 8, 8, 4096, 4096}));
  for (const PretuneItem& it : items) {
    EXPECT_EQ(it.kind, Phase::prefill);
    EXPECT_EQ(it.bucket, problem_bucket(it.problem));
    EXPECT_TRUE(it.sweep.empty());
  }
}

TEST(PretuneExpand, DecodeIsOneSweepItemPerSpec) {
  const PretuneGrid g = parse_pretune_grid(grid_with({
      {{"spec", kDecode}, {"problems", {{"batch", {1, 16}}, {"q_len", 1}, {"kv_len", {4096, 4000, 65536}}}}},
      {{"spec", kDecode}, {"problems", {{"q_len", 1}, {"kv_len", {131072}}}}}}));
  const std::vector<PretuneItem> items = expand_grid(g);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].key(), std::string(kDecode) + "|sweep");
  EXPECT_EQ(items[0].kind, Phase::decode);
  // 2 batches x (4096 and 4000 share a bucket, 65536) + 131072 from the second entry.
  ASSERT_EQ(items[0].sweep.size(), 5u);
  EXPECT_EQ(items[0].sweep[0], (Problem{1, 32, 8, 1, 4096}));
  EXPECT_EQ(items[0].sweep[4], (Problem{1, 32, 8, 1, 131072}));
  EXPECT_EQ(items[0].problem, items[0].sweep[0]);
}

TEST(PretuneExpand, LinearIsOneSweepItemPerSpecWithItsTokenCounts) {
  const char* layer = "linear a=bf16 w=int4:per_group out=bf16 n=14336 k=4096";
  const PretuneGrid g = parse_pretune_grid(grid_with({
      {{"kind", "linear"}, {"spec", layer}, {"problems", {{"m", {8, 1, 64}}}}},
      {{"spec", layer}, {"problems", {{"m", {1, 4096}}}}},
      {{"spec", "linear a=fp16 w=fp16 out=fp16 n=4096 k=4096"}}}));
  const std::vector<PretuneItem> items = expand_grid(g);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].key(), std::string(layer) + "|sweep");
  EXPECT_EQ(items[0].kind, Phase::linear);
  EXPECT_EQ(items[0].rows, (std::vector<int>{1, 8, 64, 4096}));
  EXPECT_TRUE(items[1].rows.empty());   // the sweep's default counts
  const auto refused = [](const nlohmann::json& entries, const std::string& needle) {
    try {
      parse_pretune_grid(grid_with(entries), "grid t.json");
      ADD_FAILURE() << "accepted " << entries.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({{{"spec", std::string(layer) + " flow=gemv"}}}, "flow= is what its sweep chooses");
  refused({{{"spec", layer}, {"problems", {{"m", {0}}}}}}, "problems.m: expected an integer in [1, 8192]");
  refused({{{"spec", layer}, {"problems", {{"q_len", {1}}}}}}, "unknown field 'q_len'; accepted: m");
  refused({{{"kind", "decode"}, {"spec", layer}}}, "is a linear spec in a decode entry");
}

TEST(PretuneExpand, DefaultGridIsValidAndSizedForTheBudget) {
  const PretuneGrid g = load_pretune_grid("default");
  const std::vector<PretuneItem> items = expand_grid(g);
  size_t prefill = 0, decode = 0;
  std::set<std::string> keys, prefill_specs, linear_shapes;
  for (const PretuneItem& it : items) {
    EXPECT_TRUE(keys.insert(it.key()).second) << "duplicate " << it.key();
    EXPECT_TRUE(validate(it.spec)) << it.key();
    EXPECT_EQ(it.spec.arch, Arch::unset) << it.key();
    if (it.kind == Phase::linear) {   // one sweep per layer over the default token counts
      EXPECT_TRUE(it.rows.empty()) << it.key();
      linear_shapes.insert("n" + std::to_string(it.spec.n) + "_k" + std::to_string(it.spec.k));
      continue;
    }
    EXPECT_TRUE(validate(it.spec, it.problem)) << it.key();
    if (it.kind == Phase::prefill) {
      ++prefill;
      prefill_specs.insert(to_string(it.spec));
      EXPECT_GE(it.problem.q_len, 1024);
      EXPECT_LE(it.problem.q_len, 16384);
    } else {
      ++decode;
      EXPECT_FALSE(it.sweep.empty());
      EXPECT_NE(it.spec.qk.fmt, Fmt::flashq);
    }
  }
  // Every shipped prefill point of default_grid() at d 64 and 128 (causal and not), at five sizes 1k..16k,
  // but the per_warp / per_thread ones (they run the per_token kernel), the fp16 / fp8 P·V ones,
  // qk=int4 (the int8 kernel on the H100) and the Q-smoothing ones (budget).
  std::set<std::string> shipped;
  for (const Spec& s : gen::default_grid(Arch::unset))
    if (s.phase == Phase::prefill && (s.head_dim == 64 || s.head_dim == 128) && s.qk.gran != Gran::per_warp &&
        s.qk.gran != Gran::per_thread && !(s.quantized() && s.pv.fmt != Fmt::int8) && s.qk.fmt != Fmt::int4 &&
        !(s.smooth & kSmoothQ))
      shipped.insert(to_string(s));
  EXPECT_GE(shipped.size(), 36u);
  EXPECT_EQ(prefill_specs, shipped);
  EXPECT_EQ(prefill, shipped.size() * 5);
  EXPECT_GT(decode, 0u);
  // Llama-3-8B: QKV, O, gate/up and down.
  EXPECT_EQ(linear_shapes, (std::set<std::string>{"n6144_k4096", "n4096_k4096", "n14336_k4096", "n4096_k14336"}));
  // The budget (about 10 minutes on one H100) assumes no more than this many prefill items.
  EXPECT_LE(prefill, 200u);
  // The printed grid is the grid that is used.
  EXPECT_EQ(expand_grid(parse_pretune_grid(default_pretune_grid_json())).size(), items.size());
}

TEST(PretuneExpand, OrderRunsLongestFirstAndGroupsSharedInputs) {
  const PretuneGrid g = parse_pretune_grid(grid_with({
      {{"kind", "decode"}, {"spec", kDecode}, {"problems", {{"q_len", 1}, {"kv_len", {4096}}}}},
      {{"specs", {kFp16, "prefill qk=fp16 pv=fp16 out=fp16 d=128", "prefill qk=bf16 pv=bf16 out=bf16 d=64",
                  "prefill qk=fp16 pv=fp16 out=fp16 d=64 causal"}},
       {"problems", {{"heads_q", 8}, {"q_len", {1024, 16384, 4096}}}}}}));
  const std::vector<PretuneItem> ordered = order_for_tuning(expand_grid(g));
  ASSERT_EQ(ordered.size(), 13u);
  EXPECT_EQ(ordered.back().kind, Phase::decode);
  for (size_t i = 0; i + 2 < ordered.size(); ++i) {   // prefill part: work never increases
    const Problem &a = ordered[i].problem, &b = ordered[i + 1].problem;
    EXPECT_GE(1.0 * a.q_len * a.kv_len * a.batch * a.heads_q, 1.0 * b.q_len * b.kv_len * b.batch * b.heads_q);
  }
  // Within the 16k bucket: d 64 fp16 (grid order: plain, causal), d 64 bf16, then d 128.
  EXPECT_EQ(to_string(ordered[0].spec), kFp16);
  EXPECT_EQ(to_string(ordered[1].spec), "prefill qk=fp16 pv=fp16 out=fp16 d=64 causal");
  EXPECT_EQ(to_string(ordered[2].spec), "prefill qk=bf16 pv=bf16 out=bf16 d=64");
  EXPECT_EQ(to_string(ordered[3].spec), "prefill qk=fp16 pv=fp16 out=fp16 d=128");
  EXPECT_EQ(ordered[0].problem.q_len, 16384);
  EXPECT_EQ(ordered[4].problem.q_len, 4096);
}

TEST(PretuneSchedule, PickNextAvoidsSpecsOtherWorkersAreOn) {
  EXPECT_EQ(pick_next({"a", "a", "b"}, {}), 0u);
  EXPECT_EQ(pick_next({"a", "a", "b"}, {"a"}), 2u);
  EXPECT_EQ(pick_next({"a", "b", "c"}, {"a", "b"}), 2u);
  EXPECT_EQ(pick_next({"a", "a"}, {"a"}), 0u);   // nothing else left: share the spec
}

// ---- Scheduler with fake workers ----------------------------------------------------------------------------

// What the fake workers of one test share: the "database" of stored results (per device class), how
// often each item ran, and the items that fail or throw.
struct FakeDb {
  std::mutex mutex;
  std::set<std::string> stored;          // class + "#" + key
  std::map<std::string, int> runs;       // class + "#" + key
  std::set<std::string> fail, throw_in_run, throw_in_done;   // item keys
  std::atomic<bool>* cancel = nullptr;
  int cancel_after_runs = -1;            // set *cancel when this many items have run
  int total_runs = 0;
};

class FakeWorker final : public PretuneWorker {
 public:
  FakeWorker(std::string label, std::string cls, FakeDb& db) : label_(std::move(label)), class_(std::move(cls)), db_(db) {}
  std::string device_label() override { return label_; }
  std::string device_class() override { return class_; }
  bool done(const PretuneItem& item) override {
    std::lock_guard<std::mutex> lock(db_.mutex);
    if (db_.throw_in_done.count(item.key())) throw Error(ErrorKind::failure, "cache is locked");
    return db_.stored.count(class_ + "#" + item.key()) > 0;
  }
  ItemResult run(const PretuneItem& item) override {
    std::lock_guard<std::mutex> lock(db_.mutex);
    ++db_.runs[class_ + "#" + item.key()];
    ++ran;
    if (++db_.total_runs == db_.cancel_after_runs) db_.cancel->store(true);
    if (db_.throw_in_run.count(item.key())) throw Error(ErrorKind::failure, "compile failed:\nlog line");
    if (db_.fail.count(item.key())) return {false, "no candidate passed"};
    db_.stored.insert(class_ + "#" + item.key());
    return {true, "winner"};
  }
  int ran = 0;

 private:
  std::string label_, class_;
  FakeDb& db_;
};

class RecordingSink final : public ProgressSink {
 public:
  void update(const ProgressState& s) override {
    EXPECT_LE(s.finished, s.total);
    EXPECT_GE(s.finished, last.finished);   // never goes back
    last = s;
    ++updates;
  }
  void item_failed(const ItemOutcome& o) override { failures.push_back(o); }
  void finish(const ProgressState& s) override {
    last = s;
    finished = true;
  }
  ProgressState last;
  int updates = 0;
  bool finished = false;
  std::vector<ItemOutcome> failures;
};

std::vector<PretuneItem> twelve_items() {
  return order_for_tuning(expand_grid(parse_pretune_grid(grid_with({
      {{"specs", {kFp16, "prefill qk=fp16 pv=fp16 out=fp16 d=128", "prefill qk=bf16 pv=bf16 out=bf16 d=64"}},
       {"problems", {{"heads_q", 8}, {"q_len", {1024, 2048, 4096, 8192}}}}}}))));
}

PretuneOptions fast_options(std::atomic<bool>* cancel = nullptr) {
  PretuneOptions o;
  o.cancel = cancel;
  o.refresh_s = 0.01;
  return o;
}

void expect_each_ran_once(const FakeDb& db, const std::vector<PretuneItem>& items, const std::string& cls) {
  for (const PretuneItem& it : items) {
    const auto at = db.runs.find(cls + "#" + it.key());
    ASSERT_NE(at, db.runs.end()) << it.key();
    EXPECT_EQ(at->second, 1) << it.key();
  }
}

TEST(PretuneSchedule, OneWorkerRunsEveryItemOnce) {
  const std::vector<PretuneItem> items = twelve_items();
  ASSERT_EQ(items.size(), 12u);
  FakeDb db;
  FakeWorker w("gpu0", "H100", db);
  RecordingSink sink;
  const PretuneSummary s = run_pretune(items, {&w}, fast_options(), sink);
  EXPECT_EQ(s.total, 12u);
  EXPECT_EQ(s.ran, 12u);
  EXPECT_EQ(s.resumed + s.failed + s.not_run, 0u);
  EXPECT_FALSE(s.cancelled);
  EXPECT_EQ(s.exit_code(), 0);
  EXPECT_EQ(s.outcomes.size(), 12u);
  expect_each_ran_once(db, items, "H100");
  EXPECT_TRUE(sink.finished);
  EXPECT_EQ(sink.last.finished, 12u);
  EXPECT_TRUE(sink.last.current.empty());
  EXPECT_GE(sink.updates, 1);
}

TEST(PretuneSchedule, ThreeWorkersOfOneClassShareTheItems) {
  const std::vector<PretuneItem> items = twelve_items();
  FakeDb db;
  FakeWorker a("gpu0", "H100", db), b("gpu1", "H100", db), c("gpu2", "H100", db);
  RecordingSink sink;
  const PretuneSummary s = run_pretune(items, {&a, &b, &c}, fast_options(), sink);
  EXPECT_EQ(s.total, 12u);
  EXPECT_EQ(s.ran, 12u);
  EXPECT_EQ(a.ran + b.ran + c.ran, 12);
  expect_each_ran_once(db, items, "H100");
  std::set<std::string> devices;
  for (const ItemOutcome& o : s.outcomes) devices.insert(o.device);
  EXPECT_LE(devices.size(), 3u);
  EXPECT_EQ(sink.last.workers, 3);
}

TEST(PretuneSchedule, EachDeviceClassRunsEveryItem) {
  // Two H100s and one A100: the A100's results are separate entries, so it runs everything itself.
  const std::vector<PretuneItem> items = twelve_items();
  FakeDb db;
  FakeWorker h0("gpu0", "H100", db), a1("gpu1", "A100", db), h2("gpu2", "H100", db);
  RecordingSink sink;
  const PretuneSummary s = run_pretune(items, {&h0, &a1, &h2}, fast_options(), sink);
  EXPECT_EQ(s.total, 24u);
  EXPECT_EQ(s.ran, 24u);
  EXPECT_EQ(a1.ran, 12);
  EXPECT_EQ(h0.ran + h2.ran, 12);
  expect_each_ran_once(db, items, "H100");
  expect_each_ran_once(db, items, "A100");
}

TEST(PretuneSchedule, ResumeRunsOnlyWhatTheInterruptedRunLeft) {
  const std::vector<PretuneItem> items = twelve_items();
  std::atomic<bool> cancel{false};
  FakeDb db;
  db.cancel = &cancel;
  db.cancel_after_runs = 5;   // "Ctrl-C" while the 5th item runs: it finishes, nothing new starts
  FakeWorker first("gpu0", "H100", db);
  RecordingSink sink1;
  const PretuneSummary s1 = run_pretune(items, {&first}, fast_options(&cancel), sink1);
  EXPECT_TRUE(s1.cancelled);
  EXPECT_EQ(s1.ran, 5u);
  EXPECT_EQ(s1.not_run, 7u);
  EXPECT_EQ(s1.exit_code(), 1);
  EXPECT_EQ(db.stored.size(), 5u);

  cancel = false;
  db.cancel_after_runs = -1;
  FakeWorker second("gpu0", "H100", db);
  RecordingSink sink2;
  const PretuneSummary s2 = run_pretune(items, {&second}, fast_options(&cancel), sink2);
  EXPECT_FALSE(s2.cancelled);
  EXPECT_EQ(s2.resumed, 5u);
  EXPECT_EQ(s2.ran, 7u);
  EXPECT_EQ(second.ran, 7);
  EXPECT_EQ(s2.exit_code(), 0);
  expect_each_ran_once(db, items, "H100");   // across both runs
  EXPECT_EQ(sink2.last.resumed, 5u);
}

TEST(PretuneSchedule, CancelledBeforeStartRunsNothing) {
  const std::vector<PretuneItem> items = twelve_items();
  std::atomic<bool> cancel{true};
  FakeDb db;
  FakeWorker a("gpu0", "H100", db), b("gpu1", "H100", db);
  RecordingSink sink;
  const PretuneSummary s = run_pretune(items, {&a, &b}, fast_options(&cancel), sink);
  EXPECT_TRUE(s.cancelled);
  EXPECT_EQ(s.ran + s.resumed + s.failed, 0u);
  EXPECT_EQ(s.not_run, 12u);
  EXPECT_EQ(s.exit_code(), 1);
  EXPECT_TRUE(sink.finished);
}

TEST(PretuneSchedule, AFailedItemIsRecordedAndTheRunGoesOn) {
  const std::vector<PretuneItem> items = twelve_items();
  FakeDb db;
  db.fail.insert(items[1].key());
  db.throw_in_run.insert(items[4].key());
  db.throw_in_done.insert(items[7].key());
  FakeWorker a("gpu0", "H100", db), b("gpu1", "H100", db);
  RecordingSink sink;
  const PretuneSummary s = run_pretune(items, {&a, &b}, fast_options(), sink);
  EXPECT_EQ(s.failed, 3u);
  EXPECT_EQ(s.ran, 9u);
  EXPECT_EQ(s.not_run, 0u);
  EXPECT_EQ(s.exit_code(), 1);
  std::map<std::string, std::string> reasons;
  for (const ItemOutcome& o : s.outcomes)
    if (o.status == ItemStatus::failed) reasons[o.key] = o.detail;
  EXPECT_EQ(reasons[items[1].key()], "no candidate passed");
  EXPECT_EQ(reasons[items[4].key()], "compile failed: log line");   // one line
  EXPECT_EQ(reasons[items[7].key()], "cache is locked");
  EXPECT_EQ(sink.failures.size(), 3u);
  EXPECT_EQ(sink.last.failed, 3u);
}

TEST(PretuneSchedule, NoWorkersIsBadInput) {
  RecordingSink sink;
  EXPECT_THROW(run_pretune(twelve_items(), {}, fast_options(), sink), Error);
}

TEST(PretuneSchedule, SummaryJson) {
  PretuneSummary s;
  s.total = 3;
  s.ran = 1;
  s.resumed = 1;
  s.failed = 1;
  s.elapsed_s = 2.5;
  s.outcomes.push_back({"k1", "gpu0", ItemStatus::ran, 1.0, "winner"});
  s.outcomes.push_back({"k2", "gpu0", ItemStatus::failed, 0.5, "why"});
  const nlohmann::json j = nlohmann::json::parse(summary_json(s));
  EXPECT_EQ(j["total"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["cancelled"], false);
  ASSERT_EQ(j["items"].size(), 2u);
  EXPECT_EQ(j["items"][1]["status"], "failed");
  EXPECT_EQ(j["items"][1]["detail"], "why");
}

// ---- Progress -----------------------------------------------------------------------------------------------

TEST(PretuneProgress, Durations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(72), "1m12s");
  EXPECT_EQ(format_duration(605), "10m05s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(-1), "?");
}

ProgressState example_state() {
  ProgressState s;
  s.total = 120;
  s.finished = 37;
  s.ran = 30;
  s.resumed = 7;
  s.elapsed_s = 72;
  s.mean_item_s = 3.0;
  s.workers = 1;
  return s;
}

TEST(PretuneProgress, EtaIsMeanTimesRemainingOverWorkers) {
  ProgressState s = example_state();
  EXPECT_DOUBLE_EQ(eta_seconds(s), 3.0 * 83);
  s.workers = 2;
  EXPECT_DOUBLE_EQ(eta_seconds(s), 3.0 * 83 / 2);
  s.mean_item_s = 0;   // nothing has run yet (only resumed items)
  EXPECT_LT(eta_seconds(s), 0);
  s.finished = 120;
  EXPECT_EQ(eta_seconds(s), 0);
}

TEST(PretuneProgress, LineShowsCountsTimesAndWhatEachDeviceIsOn) {
  ProgressState s = example_state();
  s.mean_item_s = 155.0 / 83;   // ETA 2m35s
  s.current = {{"gpu0", std::string(kInt8) + "|q4096_kv4096_bh256"}};
  EXPECT_EQ(format_progress_line(s, 0),
            std::string("[pretune] 37/120 (30%) elapsed 1m12s ETA 2m35s | gpu0: ") + kInt8 + " q4096_kv4096_bh256");
  // Cut to the width: the spec is shortened, the bucket kept.
  const std::string narrow = format_progress_line(s, 90);
  EXPECT_EQ(narrow, "[pretune] 37/120 (30%) elapsed 1m12s ETA 2m35s | gpu0: prefill qk=in... q4096_kv4096_bh256");
  EXPECT_EQ(narrow.size(), 90u);
  s.mean_item_s = 0;
  s.failed = 2;
  s.cancelling = true;
  s.current.clear();
  EXPECT_EQ(format_progress_line(s, 0),
            "[pretune] 37/120 (30%) elapsed 1m12s ETA ? failed 2 (stopping after the current items)");
}

TEST(PretuneProgress, SeveralDevicesFitTheWidth) {
  ProgressState s = example_state();
  s.workers = 3;
  for (const char* d : {"gpu0", "gpu1", "gpu2"}) s.current.emplace_back(d, std::string(kInt8) + "|q16384_kv16384_bh32");
  const std::string line = format_progress_line(s, 160);
  EXPECT_LE(line.size(), 160u);
  for (const char* d : {"gpu0: ", "gpu1: ", "gpu2: "}) EXPECT_NE(line.find(d), std::string::npos) << line;
  EXPECT_NE(line.find("q16384_kv16384_bh32"), std::string::npos) << line;
}

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

TEST(PretuneProgress, PlainOutputPrintsEveryFivePercentAndFailures) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  TerminalProgress p(f, /*tty=*/false);
  ProgressState s = example_state();
  s.total = 200;
  for (size_t i = 0; i <= 200; ++i) {
    s.finished = i;
    p.update(s);
    p.update(s);   // refreshes with no change print nothing
  }
  p.item_failed({"spec|bucket", "gpu1", ItemStatus::failed, 1.0, "boom"});
  p.finish(s);
  const std::string out = read_all(f);
  std::fclose(f);
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 21u + 1u);   // 0%, 5%, ... 100%, and the failure
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("[pretune] FAILED spec|bucket on gpu1: boom\n"), std::string::npos);
  EXPECT_NE(out.find("200/200 (100%)"), std::string::npos);
}

TEST(PretuneProgress, TtyOutputRewritesOneLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  TerminalProgress p(f, /*tty=*/true, 80);
  ProgressState s = example_state();
  p.update(s);
  s.finished = 38;
  p.update(s);
  p.finish(s);
  const std::string out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(out.rfind("\r[pretune] 37/120", 0), 0u);
  size_t newlines = 0;
  for (char c : out) newlines += c == '\n';
  EXPECT_EQ(newlines, 1u);   // only finish() ends the line
  EXPECT_NE(out.find("\r[pretune] 38/120"), std::string::npos);
}

}  // namespace
}  // namespace qattn
