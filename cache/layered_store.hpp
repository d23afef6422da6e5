// LayeredStore: a user-writable cache over an application-shipped read-only one (MIOpen's system/user
// databases, in one class). Lookups try the user layer, then the shipped layer; writes go only to the
// user layer. Either layer may be missing (see open_layer.hpp for why one would be): lookups then use
// what is there, and writes without a writable user layer are dropped (the open note already says why).
//
// A layer that fails after it was opened (a file damaged under a running process, a lock held past the
// busy budget, see StoreOptions::busy_timeout_ms) never fails the caller: the lookup is a miss or the
// write is dropped, and a warning is recorded; a damaged or locked layer is not used again by this object,
// so a lock held by another process costs one bounded wait, not one per write.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.hpp"

namespace qattn::cache {

class LayeredStore {
 public:
  // `shipped` must have been opened read-only. `notes` are the open notes of the layers (one line each),
  // kept as the first warnings.
  LayeredStore(std::unique_ptr<Store> user, std::unique_ptr<Store> shipped, std::vector<std::string> notes = {});
  ~LayeredStore();
  LayeredStore(const LayeredStore&) = delete;
  LayeredStore& operator=(const LayeredStore&) = delete;

  std::optional<BinaryRecord> get_binary(const std::string& key);
  void put_binary(const BinaryRecord& record);

  std::optional<TunedRecord> get_tuned(const std::string& spec, const std::string& bucket, const DeviceKey& device,
                                       const std::string& toolchain);
  // A hit in either layer wins; otherwise the most useful miss of the two (other_driver, then
  // other_toolchain, other_device, absent), the user layer first on a tie. `source` names the layer's file.
  TunedLookup lookup_tuned(const std::string& spec, const std::string& bucket, const DeviceKey& device,
                           const std::string& toolchain);
  bool put_tuned(const TunedRecord& record);   // false: not stored (slower than the stored one, or no user layer)
  // Both layers, a user row hiding the shipped row of the same key; ordered like Store::list_tuned.
  std::vector<TunedRecord> list_tuned();

  std::optional<DecisionRecord> get_decision(const std::string& kind, const std::string& key,
                                             const DeviceKey& device, const std::string& toolchain);
  void put_decision(const DecisionRecord& record);
  std::vector<DecisionRecord> list_decisions(const std::string& kind = "");

  // True when writes are stored (a user layer opened read-write).
  bool writable() const;
  // One line naming each layer, e.g. "user /home/a/.cache/qattn/qattn.db (read-write); shipped
  // /opt/app/qattn.db (read-only)"; a missing layer reads "user none".
  std::string sources() const;
  // The user layer's path, else the shipped layer's, else "".
  std::string path() const;
  // The layers as opened (null: none); a layer dropped after a failure is still returned here.
  Store* user_layer() { return user_.store.get(); }
  Store* shipped_layer() { return shipped_.store.get(); }

  // Open notes, lookup mismatches and layer failures recorded here, then each layer's own warnings;
  // each distinct line once. Also printed once on stderr when QATTN_LOG=1 (cache/log.hpp).
  std::vector<std::string> warnings() const;
  void warn(const std::string& line);

  // Trouble: a layer that could not be opened as asked, or that failed and was dropped or skipped (its
  // writes are lost). Recorded as a warning too, and printed once on stderr (cache/log.hpp
  // report_trouble). status() is the latest such line, "" while every layer works as opened.
  void trouble(const std::string& line);
  std::string status() const;

 private:
  struct Layer {
    std::unique_ptr<Store> store;
    std::atomic<bool> usable{false};   // cleared (never the store freed) when it turns out damaged
    Store* get() const { return usable ? store.get() : nullptr; }
  };
  template <class Result, class Body>
  Result guarded(Layer& layer, const char* operation, Body&& body);

  Layer user_, shipped_;
  mutable std::mutex mutex_;   // guards warnings_
  std::vector<std::string> warnings_;
  std::string status_;
};

}  // namespace qattn::cache
