#include "tests/common/metrics.hpp"

#include <stdexcept>

namespace qattn {
namespace test {

ErrorMetrics compare(const HostTensor& ref, const HostTensor& got) {
  const Shape& a = ref.shape;
  const Shape& b = got.shape;
  if (a.batch != b.batch || a.heads != b.heads || a.seq != b.seq || a.dim != b.dim)
    throw std::invalid_argument("compare: tensor shapes differ");
  return compare(ref.logical(), got.logical());
}

}  // namespace test
}  // namespace qattn
