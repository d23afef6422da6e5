// What produced a binary: part of every cache key, so that a new NVRTC, a new qattn or a changed
// template never gets served an old cubin or an old tuning decision.
#pragma once
#include <string>

namespace qattn::rt {

// "nvrtc=13.0;qattn=0.1.0;templates=<sha256 of the embedded templates>"
const std::string& toolchain_fingerprint();

}  // namespace qattn::rt
