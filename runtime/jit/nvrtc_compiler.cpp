#include "runtime/jit/nvrtc_compiler.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "generator/embedded_templates.hpp"

namespace qattn::rt {
namespace {

// The embedded headers as the two parallel arrays nvrtcCreateProgram takes; built once, read-only.
struct HeaderArrays {
  std::vector<const char*> names, texts;
};

const HeaderArrays& embedded_headers() {
  static const HeaderArrays arrays = [] {
    HeaderArrays a;
    for (const gen::EmbeddedFile& f : gen::embedded_templates()) {
      a.names.push_back(f.path);
      a.texts.push_back(f.text);
    }
    return a;
  }();
  return arrays;
}

// Destroys the program however compile() leaves.
struct ProgramOwner {
  nvrtcProgram program = nullptr;
  ~ProgramOwner() {
    if (program) nvrtcDestroyProgram(&program);
  }
};

void nvrtc_check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed: " + nvrtcGetErrorString(r));
}

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  // NVRTC 13 ends the ptxas part of the log with a NUL of its own, inside the reported size.
  log.erase(std::remove(log.begin(), log.end(), '\0'), log.end());
  return log;
}

// Little-endian reads from a byte image, bounds-checked by the callers.
template <class T>
T read_le(const std::vector<unsigned char>& b, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(b[at + i]) << (8 * i));
  return v;
}

int max_of(const std::vector<KernelUsage>& kernels, int KernelUsage::*field) {
  int best = -1;
  for (const KernelUsage& k : kernels) best = std::max(best, k.*field);
  return best;
}

}  // namespace

const std::vector<std::string>& supported_archs() {
  static const std::vector<std::string> archs = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};
  return archs;
}

bool is_supported_arch(const std::string& arch) {
  const auto& a = supported_archs();
  return std::find(a.begin(), a.end(), arch) != a.end();
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtc_check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<KernelUsage> parse_ptxas_report(const std::string& log) {
  // ptxas -v prints, per kernel:
  //   ptxas info    : Compiling entry function '<name>' for 'sm_90a'
  //   ptxas info    : Function properties for <name>
  //   ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
  //   ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 368 bytes cmem[0]
  // (device functions also get "Function properties" blocks; only entry functions are kept), and
  // where it had to serialize a kernel's wgmma pipeline, a line naming it:
  //   ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized
  //                   due to insufficient register resources for the wgmma pipeline in the function '<name>'
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex properties(R"(Function properties for (\S+))");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex serialized(R"(wgmma\.mma_async instructions are serialized.* in the function '([^']+)')");
  std::vector<KernelUsage> kernels;
  std::vector<std::string> serialized_names;   // matched after the loop: the line may precede its entry
  KernelUsage* current = nullptr;        // the entry whose "Used" line comes next
  bool properties_of_current = false;    // whether a stack-frame line belongs to it
  std::istringstream lines(log);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, serialized)) {
      serialized_names.push_back(m[1].str());
    } else if (std::regex_search(line, m, entry)) {
      kernels.push_back(KernelUsage{m[1].str()});
      current = &kernels.back();
      properties_of_current = false;
    } else if (std::regex_search(line, m, properties)) {
      properties_of_current = current && m[1].str() == current->name;
    } else if (std::regex_search(line, m, frame)) {
      if (properties_of_current) {
        current->stack_bytes = std::stoi(m[1].str());
        current->spill_store_bytes = std::stoi(m[2].str());
        current->spill_load_bytes = std::stoi(m[3].str());
      }
    } else if (current && std::regex_search(line, m, used)) {
      current->registers = std::stoi(m[1].str());
      current->static_smem_bytes =
          std::regex_search(line, m, smem) ? std::stoi(m[1].str()) : 0;   // absent means none
      current = nullptr;
      properties_of_current = false;
    }
  }
  for (KernelUsage& k : kernels)
    k.wgmma_serialized = std::find(serialized_names.begin(), serialized_names.end(), k.name) != serialized_names.end();
  return kernels;
}

std::vector<KernelUsage> read_cubin_usage(const std::vector<unsigned char>& elf) {
  // ELF64 layouts (System V gABI) and the NVIDIA attribute records ptxas writes into .nv.info:
  // {u8 format, u8 attribute, payload}; format 4 carries a u16 size then that many bytes, and the
  // per-function attributes REGCOUNT (0x2f) and FRAME_SIZE (0x11) hold {u32 symbol, u32 value}.
  constexpr unsigned char kRegCount = 0x2f, kFrameSize = 0x11;
  constexpr unsigned char kCudaEntry = 0x10;   // st_other flag of __global__ functions
  struct Section {
    uint32_t name, type;
    uint64_t offset, size;
    uint32_t link;
  };
  std::vector<KernelUsage> kernels;
  if (elf.size() < 64 || elf[0] != 0x7f || elf[1] != 'E' || elf[2] != 'L' || elf[3] != 'F' ||
      elf[4] != 2 /* 64-bit */ || elf[5] != 1 /* little-endian */)
    return kernels;
  const uint64_t shoff = read_le<uint64_t>(elf, 0x28);
  const uint16_t shentsize = read_le<uint16_t>(elf, 0x3a), shnum = read_le<uint16_t>(elf, 0x3c),
                 shstrndx = read_le<uint16_t>(elf, 0x3e);
  if (shentsize < 64 || shstrndx >= shnum || shoff + uint64_t{shnum} * shentsize > elf.size())
    return kernels;
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const size_t at = shoff + size_t{i} * shentsize;
    sections[i] = {read_le<uint32_t>(elf, at), read_le<uint32_t>(elf, at + 4),
                   read_le<uint64_t>(elf, at + 0x18), read_le<uint64_t>(elf, at + 0x20),
                   read_le<uint32_t>(elf, at + 0x28)};
    if (sections[i].type != 8 /* NOBITS */ && sections[i].offset + sections[i].size > elf.size())
      return kernels;
  }
  auto string_at = [&](const Section& table, uint64_t offset) {
    std::string out;
    for (uint64_t p = table.offset + offset; p < table.offset + table.size && elf[p]; ++p)
      out += static_cast<char>(elf[p]);
    return out;
  };
  auto section_name = [&](const Section& s) { return string_at(sections[shstrndx], s.name); };
  const Section* symtab = nullptr;
  const Section* info = nullptr;
  std::map<std::string, uint64_t> shared_sizes;   // kernel -> size of .nv.shared.<kernel>
  bool reserves_smem = false;                    // sm_90+: the driver's 1 KB is counted in there
  for (const Section& s : sections) {
    const std::string name = section_name(s);
    if (s.type == 2 /* SYMTAB */) symtab = &s;
    if (name == ".nv.info") info = &s;
    if (name.rfind(".nv.shared.reserved", 0) == 0) reserves_smem = true;
    else if (name.rfind(".nv.shared.", 0) == 0) shared_sizes[name.substr(11)] = s.size;
  }
  if (!symtab || symtab->link >= shnum) return kernels;
  std::map<uint32_t, size_t> kernel_of_symbol;
  for (uint64_t at = symtab->offset; at + 24 <= symtab->offset + symtab->size; at += 24) {
    const unsigned char type = elf[at + 4] & 0xf, other = elf[at + 5];
    if (type != 2 /* FUNC */ || !(other & kCudaEntry)) continue;
    KernelUsage k;
    k.name = string_at(sections[symtab->link], read_le<uint32_t>(elf, at));
    k.stack_bytes = 0;   // no FRAME_SIZE record means no frame
    auto shared = shared_sizes.find(k.name);
    k.static_smem_bytes = 0;
    if (shared != shared_sizes.end()) {
      uint64_t bytes = shared->second;
      if (reserves_smem) bytes = bytes >= 1024 ? bytes - 1024 : 0;
      k.static_smem_bytes = static_cast<int>(bytes);
    }
    kernel_of_symbol[static_cast<uint32_t>((at - symtab->offset) / 24)] = kernels.size();
    kernels.push_back(k);
  }
  if (!info) return kernels;
  for (uint64_t p = info->offset, end = info->offset + info->size; p + 2 <= end;) {
    const unsigned char format = elf[p], attribute = elf[p + 1];
    uint64_t payload = 0, next = p + 2;
    if (format == 2 || format == 3) {
      next = p + 4;
    } else if (format == 4) {
      if (p + 4 > end) break;
      payload = read_le<uint16_t>(elf, p + 2);
      next = p + 4 + payload;
    } else if (format != 1) {
      break;   // unknown record format: stop rather than misread
    }
    if (next > end) break;
    if (format == 4 && payload == 8 && (attribute == kRegCount || attribute == kFrameSize)) {
      auto k = kernel_of_symbol.find(read_le<uint32_t>(elf, p + 4));
      const int value = static_cast<int>(read_le<uint32_t>(elf, p + 8));
      if (k != kernel_of_symbol.end())
        (attribute == kRegCount ? kernels[k->second].registers : kernels[k->second].stack_bytes) = value;
    }
    p = next;
  }
  return kernels;
}

CompileResult compile(const CompileRequest& request) {
  if (!is_supported_arch(request.arch)) {
    std::string accepted;
    for (const std::string& a : supported_archs()) accepted += (accepted.empty() ? "" : ", ") + a;
    throw std::invalid_argument("unknown arch '" + request.arch + "' (accepted: " + accepted + ")");
  }
  const auto start = std::chrono::steady_clock::now();
  CompileResult result;
  result.options_used = {"-std=c++17", "-arch=" + request.arch, "-default-device",
                         "--ptxas-options=-v", "-no-cache"};
  result.options_used.insert(result.options_used.end(), request.extra_options.begin(),
                             request.extra_options.end());

  const HeaderArrays& headers = embedded_headers();
  const std::string name = request.program_name.empty() ? "qattn.cu" : request.program_name;
  ProgramOwner owner;
  nvrtc_check(nvrtcCreateProgram(&owner.program, request.source.c_str(), name.c_str(),
                                 static_cast<int>(headers.names.size()), headers.texts.data(),
                                 headers.names.data()),
              "nvrtcCreateProgram");
  for (const std::string& expr : request.name_expressions)
    nvrtc_check(nvrtcAddNameExpression(owner.program, expr.c_str()), "nvrtcAddNameExpression");

  std::vector<const char*> options;
  for (const std::string& o : result.options_used) options.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(owner.program, static_cast<int>(options.size()), options.data());
  result.log = program_log(owner.program);
  if (compiled != NVRTC_SUCCESS) {
    if (result.log.empty()) result.log = nvrtcGetErrorString(compiled);
  } else {
    size_t size = 0;
    nvrtc_check(nvrtcGetCUBINSize(owner.program, &size), "nvrtcGetCUBINSize");
    result.cubin.resize(size);
    nvrtc_check(nvrtcGetCUBIN(owner.program, reinterpret_cast<char*>(result.cubin.data())),
                "nvrtcGetCUBIN");
    if (request.want_ptx) {
      nvrtc_check(nvrtcGetPTXSize(owner.program, &size), "nvrtcGetPTXSize");
      result.ptx.assign(size, '\0');
      nvrtc_check(nvrtcGetPTX(owner.program, result.ptx.data()), "nvrtcGetPTX");
      if (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();
    }
    for (const std::string& expr : request.name_expressions) {
      const char* lowered = nullptr;
      nvrtc_check(nvrtcGetLoweredName(owner.program, expr.c_str(), &lowered), "nvrtcGetLoweredName");
      result.lowered_names[expr] = lowered;
    }
    // The cubin is the authority; the ptxas report adds the spill counts when NVRTC printed it.
    result.kernels = read_cubin_usage(result.cubin);
    const std::vector<KernelUsage> reported = parse_ptxas_report(result.log);
    if (result.kernels.empty()) result.kernels = reported;
    for (KernelUsage& k : result.kernels)
      for (const KernelUsage& r : reported)
        if (r.name == k.name) {
          k.spill_store_bytes = r.spill_store_bytes;
          k.spill_load_bytes = r.spill_load_bytes;
          k.wgmma_serialized = r.wgmma_serialized;
          if (k.registers < 0) k.registers = r.registers;
        }
    for (const KernelUsage& k : result.kernels) result.wgmma_serialized = result.wgmma_serialized || k.wgmma_serialized;
    result.registers = max_of(result.kernels, &KernelUsage::registers);
    result.spill_store_bytes = max_of(result.kernels, &KernelUsage::spill_store_bytes);
    result.spill_load_bytes = max_of(result.kernels, &KernelUsage::spill_load_bytes);
    result.static_smem_bytes = max_of(result.kernels, &KernelUsage::static_smem_bytes);
    result.stack_bytes = max_of(result.kernels, &KernelUsage::stack_bytes);
    result.ok = !result.cubin.empty();
    if (!result.ok) result.log += "\nNVRTC produced an empty cubin";
  }
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace qattn::rt
