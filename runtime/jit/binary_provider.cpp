#include "runtime/jit/binary_provider.hpp"

#include "runtime/jit/compile_pool.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn::rt {

std::vector<Binary> BinaryProvider::get(const std::vector<gen::Source>& sources, bool want_ptx) {
  std::vector<Binary> out(sources.size());
  std::vector<CompileRequest> requests;
  std::vector<size_t> pending;
  for (size_t i = 0; i < sources.size(); ++i) {
    const gen::Source& s = sources[i];
    Binary& b = out[i];
    b.kernel_name = s.kernel_name;
    b.key = cache::binary_key(s.text, s.options, to_string(s.arch), toolchain_fingerprint());
    if (store_ && !want_ptx) {
      if (auto rec = store_->get_binary(b.key)) {
        b.cubin = std::move(rec->image);
        b.registers = rec->registers;
        b.spill_bytes = rec->spill_bytes;
        b.smem_bytes = rec->smem_bytes;
        b.compile_ms = rec->compile_ms;
        b.from_cache = true;
        ++cache_hits_;
        continue;
      }
    }
    CompileRequest r;
    r.source = s.text;
    r.program_name = s.kernel_name + ".cu";
    r.arch = to_string(s.arch);
    r.extra_options = s.options;
    r.want_ptx = want_ptx;
    requests.push_back(std::move(r));
    pending.push_back(i);
  }
  if (requests.empty()) return out;
  const std::vector<CompileOutcome> results = compile_parallel(requests);
  compiles_ += static_cast<long long>(results.size());
  for (size_t j = 0; j < results.size(); ++j) {
    Binary& b = out[pending[j]];
    const CompileOutcome& o = results[j];
    if (!o.ok()) {
      b.error = "compiling " + b.kernel_name + " for " + requests[j].arch + " failed: " + o.error_message();
      continue;
    }
    const CompileResult& r = o.result;
    b.cubin = r.cubin;
    b.ptx = r.ptx;
    b.log = r.log;
    b.registers = r.registers;
    b.spill_bytes = r.spill_store_bytes;
    b.wgmma_serialized = r.wgmma_serialized;
    b.compile_ms = r.compile_ms;
    if (store_ && writable_) {
      cache::BinaryRecord rec;
      rec.key = b.key;
      rec.kernel_name = b.kernel_name;
      rec.arch = requests[j].arch;
      for (const auto& opt : r.options_used) rec.options += opt + " ";
      rec.toolchain = toolchain_fingerprint();
      rec.image = r.cubin;
      rec.registers = r.registers;
      rec.spill_bytes = r.spill_store_bytes;
      rec.compile_ms = r.compile_ms;
      store_->put_binary(rec);
    }
  }
  return out;
}

}  // namespace qattn::rt
