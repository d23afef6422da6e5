#include "cache/layered_store.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "cache/log.hpp"

namespace qattn::cache {
namespace {

constexpr std::size_t kMaxWarnings = 200;

int usefulness(TunedLookup::Status status) {
  switch (status) {
    case TunedLookup::Status::hit: return 0;
    case TunedLookup::Status::other_driver: return 1;
    case TunedLookup::Status::other_toolchain: return 2;
    case TunedLookup::Status::other_device: return 3;
    case TunedLookup::Status::absent: return 4;
  }
  return 5;
}

auto tuned_key(const TunedRecord& r) { return std::make_tuple(r.spec, r.bucket, r.device.str(), r.toolchain); }
auto decision_key(const DecisionRecord& r) { return std::make_tuple(r.kind, r.key, r.device.str(), r.toolchain); }

// The union of two key-ordered lists, `first` hiding rows of `second` with the same key.
template <class Record, class KeyOf>
std::vector<Record> merge_layers(std::vector<Record> first, std::vector<Record> second, KeyOf key_of) {
  std::map<decltype(key_of(first.front())), Record> rows;
  for (auto& r : second) rows.insert_or_assign(key_of(r), std::move(r));
  for (auto& r : first) rows.insert_or_assign(key_of(r), std::move(r));
  std::vector<Record> out;
  out.reserve(rows.size());
  for (auto& entry : rows) out.push_back(std::move(entry.second));
  return out;
}

}  // namespace

LayeredStore::LayeredStore(std::unique_ptr<Store> user, std::unique_ptr<Store> shipped,
                           std::vector<std::string> notes)
{
  if (shipped && !shipped->read_only()) {
    throw std::invalid_argument("LayeredStore: the shipped layer " + shipped->path() + " must be opened read-only");
  }
  user_.usable = user != nullptr;
  user_.store = std::move(user);
  shipped_.usable = shipped != nullptr;
  shipped_.store = std::move(shipped);
  for (const auto& note : notes) {
    if (!note.empty()) trouble(note);
  }
}

LayeredStore::~LayeredStore() = default;

void LayeredStore::warn(const std::string& line) {
  log_once(line);
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(warnings_.begin(), warnings_.end(), line) != warnings_.end()) return;
  if (warnings_.size() == kMaxWarnings) warnings_.erase(warnings_.begin());
  warnings_.push_back(line);
}

void LayeredStore::trouble(const std::string& line) {
  report_trouble(line);
  warn(line);
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = line;
}

std::string LayeredStore::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

std::vector<std::string> LayeredStore::warnings() const {
  std::vector<std::string> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all = warnings_;
  }
  for (const Store* layer : {user_.store.get(), shipped_.store.get()}) {
    if (!layer) continue;
    for (auto& line : layer->warnings()) {
      if (std::find(all.begin(), all.end(), line) == all.end()) all.push_back(std::move(line));
    }
  }
  return all;
}

// A cache must never take the process down: a layer's CacheError becomes a warning and an empty Result.
// A damaged layer is dropped (its next query would fail the same way), and so is one locked by another
// process past the whole busy budget (waiting again on every write would multiply that wait); any other
// failure skips this operation only. Dropping only clears a flag: another thread may be inside the same
// Store, which stays alive.
template <class Result, class Body>
Result LayeredStore::guarded(Layer& layer, const char* operation, Body&& body) {
  Store* store = layer.get();
  if (!store) return Result{};
  try {
    return body(*store);
  } catch (const CacheError& error) {
    if (error.kind() == CacheError::Kind::damaged || error.kind() == CacheError::Kind::busy) {
      const bool first = layer.usable.exchange(false);
      if (first) trouble(std::string(error.what()) + "; " + operation + " failed, this layer is not used again by this process");
    } else {
      trouble(std::string(error.what()) + "; " + operation + " skipped");
    }
    return Result{};
  }
}

std::optional<BinaryRecord> LayeredStore::get_binary(const std::string& key) {
  using Found = std::optional<BinaryRecord>;
  if (Found hit = guarded<Found>(user_, "get_binary", [&](Store& s) { return s.get_binary(key); })) return hit;
  return guarded<Found>(shipped_, "get_binary", [&](Store& s) { return s.get_binary(key); });
}

void LayeredStore::put_binary(const BinaryRecord& record) {
  if (!writable()) return;
  guarded<bool>(user_, "put_binary", [&](Store& s) {
    s.put_binary(record);
    return true;
  });
}

std::optional<TunedRecord> LayeredStore::get_tuned(const std::string& spec, const std::string& bucket,
                                                   const DeviceKey& device, const std::string& toolchain) {
  using Found = std::optional<TunedRecord>;
  auto get = [&](Store& s) { return s.get_tuned(spec, bucket, device, toolchain); };
  if (Found hit = guarded<Found>(user_, "get_tuned", get)) return hit;
  return guarded<Found>(shipped_, "get_tuned", get);
}

TunedLookup LayeredStore::lookup_tuned(const std::string& spec, const std::string& bucket, const DeviceKey& device,
                                       const std::string& toolchain) {
  TunedLookup best;
  best.reason = "no tuned winner of " + spec + " for " + bucket + " (no cache layer open)";
  auto lookup = [&](Store& s) { return s.lookup_tuned(spec, bucket, device, toolchain); };
  for (Layer* layer : {&user_, &shipped_}) {
    if (!layer->get()) continue;
    TunedLookup found = guarded<TunedLookup>(*layer, "lookup_tuned", lookup);
    if (found.status == TunedLookup::Status::hit) return found;
    if (usefulness(found.status) < usefulness(best.status)) best = std::move(found);
  }
  return best;
}

bool LayeredStore::put_tuned(const TunedRecord& record) {
  if (!writable()) return false;
  return guarded<bool>(user_, "put_tuned", [&](Store& s) { return s.put_tuned(record); });
}

std::vector<TunedRecord> LayeredStore::list_tuned() {
  using Rows = std::vector<TunedRecord>;
  auto list = [](Store& s) { return s.list_tuned(); };
  return merge_layers(guarded<Rows>(user_, "list_tuned", list), guarded<Rows>(shipped_, "list_tuned", list),
                      tuned_key);
}

std::optional<DecisionRecord> LayeredStore::get_decision(const std::string& kind, const std::string& key,
                                                         const DeviceKey& device, const std::string& toolchain) {
  using Found = std::optional<DecisionRecord>;
  auto get = [&](Store& s) { return s.get_decision(kind, key, device, toolchain); };
  if (Found hit = guarded<Found>(user_, "get_decision", get)) return hit;
  return guarded<Found>(shipped_, "get_decision", get);
}

void LayeredStore::put_decision(const DecisionRecord& record) {
  if (!writable()) return;
  guarded<bool>(user_, "put_decision", [&](Store& s) {
    s.put_decision(record);
    return true;
  });
}

std::vector<DecisionRecord> LayeredStore::list_decisions(const std::string& kind) {
  using Rows = std::vector<DecisionRecord>;
  auto list = [&](Store& s) { return s.list_decisions(kind); };
  return merge_layers(guarded<Rows>(user_, "list_decisions", list),
                      guarded<Rows>(shipped_, "list_decisions", list), decision_key);
}

bool LayeredStore::writable() const {
  const Store* user = user_.get();
  return user && !user->read_only();
}

std::string LayeredStore::sources() const {
  auto describe = [](const char* name, const Layer& layer) {
    if (!layer.store) return std::string(name) + " none";
    return std::string(name) + " " + layer.store->path() +
           (!layer.usable ? " (dropped after a failure)" : layer.store->read_only() ? " (read-only)" : " (read-write)");
  };
  return describe("user", user_) + "; " + describe("shipped", shipped_);
}

std::string LayeredStore::path() const {
  if (user_.store) return user_.store->path();
  if (shipped_.store) return shipped_.store->path();
  return "";
}

}  // namespace qattn::cache
