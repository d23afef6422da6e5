#include "runtime/jit/toolchain.hpp"

#include "generator/embedded_templates.hpp"
#include "qattn/runtime.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"

namespace qattn {
namespace rt {

const std::string& toolchain_fingerprint() {
  static const std::string fp = "nvrtc=" + nvrtc_version() + ";qattn=" QATTN_VERSION ";templates=" +
                                std::string(gen::embedded_templates_digest());
  return fp;
}

}  // namespace rt

std::string version_string() { return "qattn " QATTN_VERSION ", nvrtc " + rt::nvrtc_version(); }

}  // namespace qattn
