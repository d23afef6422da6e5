// The device templates embedded into the library at build time (see templates/CMakeLists.txt).
#pragma once
#include <string>
#include <vector>

namespace qattn::gen {

struct EmbeddedFile {
  const char* path;   // relative to templates/, e.g. "qattn/abi.h"; how a rendered TU #includes it
  const char* text;
};

const std::vector<EmbeddedFile>& embedded_templates();
// SHA-256 (hex) over every embedded path and text: part of each binary-cache key.
const char* embedded_templates_digest();

}  // namespace qattn::gen
