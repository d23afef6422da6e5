#include "runtime/tuning/quant_decision_store.hpp"

namespace qattn::rt {

std::optional<std::string> CacheDecisionStore::load(const std::string& layer_key) {
  if (auto rec = store_.get_decision(kQuantFormatKind, layer_key, device_, toolchain_)) return rec->json;
  return std::nullopt;
}

void CacheDecisionStore::save(const std::string& layer_key, const std::string& json) {
  if (!store_.writable()) return;
  cache::DecisionRecord rec;
  rec.kind = kQuantFormatKind;
  rec.key = layer_key;
  rec.device = device_;
  rec.toolchain = toolchain_;
  rec.json = json;
  store_.put_decision(rec);
}

}  // namespace qattn::rt
