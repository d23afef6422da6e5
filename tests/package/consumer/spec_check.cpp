// Reads a spec from the command line and prints its canonical text, and its kernel name for the default
// tiling when the spec names an arch. Exits with the library's error kind (2: bad input) otherwise,
// which also proves that qattn::Error thrown inside libqattn.so is caught here by type.
#include <iostream>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/spec.hpp"
#include "qattn/validate.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: spec_check '<spec>', e.g. 'prefill qk=int8:per_token pv=fp16 out=fp16 d=128'\n";
    return 2;
  }
  try {
    const qattn::Spec spec = qattn::parse_spec(argv[1]);
    qattn::require(qattn::validate(spec));
    std::cout << "canonical: " << qattn::to_string(spec) << "\n";
    if (spec.arch != qattn::Arch::unset) std::cout << "kernel: " << qattn::kernel_name(spec, qattn::Tiling{}) << "\n";
    std::cout << "library: " << qattn::version_string() << "\n";
    return 0;
  } catch (const qattn::Error& e) {
    std::cerr << "qattn: " << e.what() << "\n";
    return static_cast<int>(e.kind());
  }
}
