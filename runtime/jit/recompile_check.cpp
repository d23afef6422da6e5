#include "runtime/jit/recompile_check.hpp"

#include <algorithm>
#include <exception>
#include <regex>
#include <stdexcept>

#include "cache/digest.hpp"
#include "cache/keys.hpp"
#include "cache/maintenance.hpp"
#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "qattn/kernel_name.hpp"
#include "runtime/jit/compile_pool.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn::rt {
namespace {

// A filter longer than this is refused: std::regex recurses per nesting level, so a long enough
// pattern overflows the stack, and no kernel name needs more.
constexpr std::size_t kMaxFilterChars = 256;

// The pass tag's suffixes (quant_plan.cpp): "_s<S>" for a sampled mean of S tokens, "_1p" for one pass.
int sample_of(const std::string& tag) {
  const std::size_t at = tag.rfind("_s");
  if (at == std::string::npos || at + 2 >= tag.size()) return 0;
  int s = 0;
  for (std::size_t i = at + 2; i < tag.size(); ++i) {
    if (tag[i] < '0' || tag[i] > '9' || s > 1000000) return 0;
    s = s * 10 + (tag[i] - '0');
  }
  return s;
}

// A quantization pass: the request its name records, and a problem under which plan_quant takes the
// form its tag names (one pass needs enough resident blocks, a sampled mean a longer sequence).
gen::Source rebuild_quant(const HelperKernel& h, Arch arch) {
  gen::QuantRequest r;
  r.in = h.in;
  r.gran = h.code.gran;
  r.group = h.group;
  r.smooth = h.smooth;
  r.transpose = h.transpose;
  r.d = h.head_dim;
  r.code = h.code.fmt == Fmt::fp8e4m3 ? Fmt::fp8e4m3 : Fmt::int8;
  r.pack4 = h.code.fmt == Fmt::int4;
  r.qmax = r.pack4 ? 7 : 127;
  r.block_mean = h.block_mean;
  r.rotate = h.rotate;
  const int sample = sample_of(h.op);
  const bool one_pass = h.op.size() > 3 && h.op.compare(h.op.size() - 3, 3, "_1p") == 0;
  gen::QuantProblem p;
  p.seq_len = p.seq_pad = sample > 0 ? ((2 * sample + 127) / 128) * 128 : 1024;
  p.mean_sample_tokens = sample;
  p.resident_blocks = one_pass ? (1 << 24) : 0;
  for (const gen::QuantLaunch& launch : gen::plan_quant(r, p).launches)
    if (launch.tag == h.op) return gen::render_quant_pass(r, launch, arch);
  throw std::invalid_argument("no quantization plan has a pass '" + h.op + "'");
}

Spec helper_spec(const HelperKernel& h, Arch arch) {
  Spec s;
  s.phase = Phase::decode;
  s.out = h.in;
  s.head_dim = h.head_dim > 0 ? h.head_dim : 128;   // the kernels for every head dim ignore it
  s.arch = arch;
  return s;
}

gen::Source rebuild(const std::string& name, Arch arch) {
  const ParsedKernelName k = parse_kernel_name(name);
  const HelperKernel& h = k.helper;
  switch (k.family) {
    case KernelFamily::attention:
      if (k.spec.arch != arch)
        throw std::invalid_argument(std::string("the name is for ") + to_string(k.spec.arch) + ", the row for " +
                                    to_string(arch));
      return gen::render_kernel(k.spec, k.tiling);
    case KernelFamily::quant:
      return rebuild_quant(h, arch);
    case KernelFamily::lse_correction:
      return h.op == "addscaled" ? gen::render_lse_addscaled(arch) : gen::render_lse_rowdot(helper_spec(h, arch));
    case KernelFamily::decode_combine:
      return gen::render_decode_combine(helper_spec(h, arch));
    case KernelFamily::kv_smooth:
      return gen::render_kv_smooth(helper_spec(h, arch), h.op);
    case KernelFamily::kv_append:
    case KernelFamily::kv_gather: {
      Spec s = helper_spec(h, arch);
      s.qk = h.code;
      s.paged = h.paged;
      return k.family == KernelFamily::kv_append ? gen::render_kv_append(s) : gen::render_kv_gather(s);
    }
    case KernelFamily::flashq: {
      const Spec s = parse_spec(std::string("decode qk=flashq:per_channel pv=flashq:per_channel out=") +
                                to_string(h.in) + " d=" + std::to_string(h.head_dim > 0 ? h.head_dim : 128) +
                                (h.paged ? " paged" : "") + " arch=" + to_string(arch));
      if (h.op == "stats") return gen::render_flashq_stats(s);
      if (h.op == "prefill") return gen::render_flashq_prefill(s);
      if (h.op == "append") return gen::render_flashq_append(s);
      return gen::render_flashq_lens(s);
    }
  }
  throw std::invalid_argument("unknown kernel family");
}

std::string digest_line(const std::vector<unsigned char>& image) {
  return std::to_string(image.size()) + " bytes, sha256 " +
         cache::sha256_hex(image.data(), image.size()).substr(0, 12) + "...";
}

// -1 is "unknown" (a spill count NVRTC left out of a repeated compile's report, see KernelUsage).
bool known_and_differ(int stored, int rebuilt) { return stored >= 0 && rebuilt >= 0 && stored != rebuilt; }

}  // namespace

const char* to_string(RecompileEntry::Status status) {
  switch (status) {
    case RecompileEntry::Status::matched: return "matched";
    case RecompileEntry::Status::mismatched: return "mismatched";
    case RecompileEntry::Status::not_checkable: return "not_checkable";
  }
  return "?";
}

bool rebuild_source(const std::string& kernel_name, const std::string& arch, gen::Source* out, std::string* why) {
  try {
    gen::Source s = rebuild(kernel_name, parse_arch(arch));
    if (s.kernel_name != kernel_name) {
      *why = "it renders as " + s.kernel_name;
      return false;
    }
    *out = std::move(s);
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

RecompileReport recompile_check(const std::string& db_path, const RecompileOptions& options) {
  if (options.filter.size() > kMaxFilterChars)
    throw std::invalid_argument("--filter is " + std::to_string(options.filter.size()) + " characters; accepted: at most " +
                                std::to_string(kMaxFilterChars));
  std::regex filter;
  try {
    if (!options.filter.empty()) filter = std::regex(options.filter);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("--filter '" + options.filter + "' is not a regular expression (" + e.what() +
                                "); accepted: an ECMAScript regex searched in the kernel name");
  }
  RecompileReport report;
  report.toolchain = toolchain_fingerprint();
  std::vector<cache::BinaryRecord> rows = cache::read_binaries(db_path);
  std::vector<CompileRequest> requests;
  std::vector<std::size_t> pending;                      // entry index of each request
  std::vector<const cache::BinaryRecord*> stored_image;   // the row of each request
  for (cache::BinaryRecord& row : rows) {
    if (!options.filter.empty() && !std::regex_search(row.kernel_name, filter)) {
      ++report.filtered_out;
      continue;
    }
    RecompileEntry e;
    e.key = row.key, e.kernel_name = row.kernel_name, e.arch = row.arch, e.toolchain = row.toolchain;
    if (row.toolchain != report.toolchain) {
      e.status = RecompileEntry::Status::not_checkable;
      e.detail = "not checkable here (toolchain " + row.toolchain + ", current " + report.toolchain + ")";
    } else {
      // This qattn made every row of its own toolchain, so a row it cannot rebuild is not one it made.
      gen::Source src;
      std::string why;
      e.status = RecompileEntry::Status::mismatched;
      if (!rebuild_source(row.kernel_name, row.arch, &src, &why)) {
        e.detail = "cannot be rebuilt: " + why;
      } else if (cache::binary_key(src.text, src.options, row.arch, report.toolchain) != row.key) {
        e.detail = "its key is not the key of the source this qattn renders for it";
      } else {
        CompileRequest r;
        r.source = std::move(src.text);
        r.program_name = row.kernel_name + ".cu";
        r.arch = row.arch;
        r.extra_options = src.options;
        requests.push_back(std::move(r));
        pending.push_back(report.entries.size());
        stored_image.push_back(&row);
        e.status = RecompileEntry::Status::matched;   // until the compile says otherwise
      }
    }
    report.entries.push_back(std::move(e));
  }
  const std::vector<CompileOutcome> outcomes = compile_parallel(requests, options.jobs);
  // A rebuild that differs from the stored image is built once more: NVRTC's output for some large
  // kernels (FlashQ's GEMV decode) depends on the compiling process's memory layout, so two builds of
  // one source can differ. When the two rebuilds differ from each other, a rebuild proves nothing
  // either way and the row is not checkable; when they agree, the stored image is not this qattn's.
  std::vector<std::size_t> again;   // request indices
  std::vector<CompileRequest> again_requests;
  for (std::size_t j = 0; j < pending.size(); ++j)
    if (outcomes[j].ok() && outcomes[j].result.cubin != stored_image[j]->image) {
      again.push_back(j);
      again_requests.push_back(requests[j]);
    }
  const std::vector<CompileOutcome> second = compile_parallel(again_requests, options.jobs);
  std::vector<bool> reproducible(pending.size(), true);
  for (std::size_t a = 0; a < again.size(); ++a)
    reproducible[again[a]] = second[a].ok() && second[a].result.cubin == outcomes[again[a]].result.cubin;
  for (std::size_t j = 0; j < pending.size(); ++j) {
    RecompileEntry& e = report.entries[pending[j]];
    const std::vector<unsigned char>& stored = stored_image[j]->image;
    const CompileOutcome& o = outcomes[j];
    if (!o.ok()) {
      e.status = RecompileEntry::Status::mismatched;
      const std::string message = o.error_message();
      e.detail = "rebuilding it failed: " + message.substr(0, std::min<std::size_t>(200, message.find('\n')));
    } else if (o.result.cubin != stored && !reproducible[j]) {
      e.status = RecompileEntry::Status::not_checkable;
      e.detail = "not checkable by rebuilding: two builds of its source here differ from each other (" +
                 digest_line(o.result.cubin) + "), as NVRTC's output for this kernel varies between compiles";
    } else if (o.result.cubin != stored) {
      e.status = RecompileEntry::Status::mismatched;
      e.detail = "stored image (" + digest_line(stored) + ") is not what this qattn builds (" +
                 digest_line(o.result.cubin) + ")";
    } else if (known_and_differ(stored_image[j]->registers, o.result.registers) ||
               known_and_differ(stored_image[j]->spill_bytes, o.result.spill_store_bytes)) {
      // The runtime reads these beside the image (reports, spill checks), so they are bound to it too.
      e.status = RecompileEntry::Status::mismatched;
      e.detail = "stored registers " + std::to_string(stored_image[j]->registers) + ", spills " +
                 std::to_string(stored_image[j]->spill_bytes) + " are not the rebuilt kernel's (" +
                 std::to_string(o.result.registers) + ", " + std::to_string(o.result.spill_store_bytes) + ")";
    }
  }
  for (const RecompileEntry& e : report.entries) {
    ++report.checked;
    if (e.status == RecompileEntry::Status::matched) ++report.matched;
    if (e.status == RecompileEntry::Status::mismatched) ++report.mismatched;
    if (e.status == RecompileEntry::Status::not_checkable) ++report.not_checkable;
  }
  return report;
}

}  // namespace qattn::rt
