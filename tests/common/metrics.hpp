// Error metrics between a float64 reference and a result (reference/metrics.hpp), plus the HostTensor
// form the tests use.
#pragma once
#include "reference/metrics.hpp"
#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

using reference::compare;
using reference::ErrorMetrics;
// Element by logical index, so the two tensors may have different layouts (shapes must match).
ErrorMetrics compare(const HostTensor& ref, const HostTensor& got);

}  // namespace test
}  // namespace qattn
