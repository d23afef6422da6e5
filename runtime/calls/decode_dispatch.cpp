// decode()'s tuned dispatch: a spec with flow=auto takes the dataflow and tiling of the stored inflection
// table for its M = gqa x q_len and KV length, and a call with no split count takes the stored split
// table's; both come from `qattn pretune` (tuner/inflection.cpp sweeps, kinds decode_dataflow and
// decode_splits in the cache's decision table). Without a table the defaults stay: mma, and
// plan_decode_splits. No timing ever happens here.
#include "qattn/error.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn {

std::shared_ptr<const DecodeDispatch> Runtime::Impl::decode_dispatch(const Spec& resolved) {
  Spec family_spec = resolved;   // what decode_family_key keeps
  family_spec.flow = Dataflow::automatic;
  family_spec.split_k = 0;
  const SpecFields key = spec_fields(family_spec);
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (auto it = decode_dispatches.find(key); it != decode_dispatches.end()) return it->second;
  // First call of this family: its text, and the stored decisions.
  const std::string family = decode_family_key(resolved);
  std::shared_ptr<DecodeDispatch> table;
  if (store) {
    const cache::DeviceKey dev = device_key();
    const std::string& tc = rt::toolchain_fingerprint();
    // A stored decision that no longer parses is reported and ignored (the defaults serve the family).
    try {
      if (auto rec = store->get_decision(kDecodeDataflowKind, family, dev, tc)) {
        table = std::make_shared<DecodeDispatch>();
        table->set_dataflow(parse_inflection_table(rec->json));
      }
      if (auto rec = store->get_decision(kDecodeSplitsKind, family, dev, tc)) {
        if (!table) table = std::make_shared<DecodeDispatch>();
        table->set_splits(parse_split_table(rec->json));
      }
    } catch (const Error& e) {
      table.reset();
      dispatch_warnings.push_back("ignoring the stored decode decisions of '" + family + "': " + e.what());
    }
  }
  decode_dispatches[key] = table;
  return table;
}

Runtime::Impl::DecodeRoute Runtime::Impl::route_decode(const Spec& resolved, const Problem& p, const Tiling& tiling,
                                                       int splits) {
  DecodeRoute r{resolved, tiling, splits};
  const bool pick_flow = resolved.flow == Dataflow::automatic;
  const bool pick_splits = splits == 0 && resolved.split_k == 0;
  if (!pick_flow && !pick_splits) return r;
  const std::shared_ptr<const DecodeDispatch> table = decode_dispatch(resolved);
  if (pick_flow) {
    r.spec.flow = Dataflow::mma;
    if (table && table->has_dataflow()) {
      const DecodeChoice c = table->choose(resolved.gqa * p.q_len, p.kv_len);
      r.spec.flow = c.flow;
      // A caller's tiling belongs to the flow the caller had in mind: keep it only where it is valid.
      if (tiling.block_m == 0 || !validate(r.spec, tiling, limits())) r.tiling = c.tiling;
    }
  }
  if (pick_splits && table && table->has_splits())
    r.splits = table->splits(static_cast<long long>(p.batch) * p.heads_kv, p.kv_len);
  return r;
}

}  // namespace qattn
