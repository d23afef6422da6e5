// A float64 host tensor with explicit strides: the one currency of the CPU references.
// Element (b, h, s, c) lives at data[b*sb + h*sh + s*ss + c*sc], exactly like qattn::TensorRef, so the
// same strides describe the host copy and the device buffer ([b,h,s,d] and [b,s,h,d] are stride choices).
#pragma once
#include <string>
#include <vector>

namespace qattn {
namespace test {

enum class Layout { bhsd, bshd };

struct Shape {
  int batch = 1, heads = 1, seq = 1, dim = 1;
  long long numel() const { return 1LL * batch * heads * seq * dim; }
};

struct Strides {
  long long sb = 0, sh = 0, ss = 0, sc = 1;
};

Strides dense_strides(const Shape& shape, Layout layout);
const char* to_string(Layout layout);

struct HostTensor {
  Shape shape;
  Strides strides;
  std::vector<double> data;   // storage_size(shape, strides) elements

  long long offset(int b, int h, int s, int c) const {
    return b * strides.sb + h * strides.sh + s * strides.ss + c * strides.sc;
  }
  double& at(int b, int h, int s, int c) { return data[offset(b, h, s, c)]; }
  double at(int b, int h, int s, int c) const { return data[offset(b, h, s, c)]; }

  static HostTensor zeros(const Shape& shape, Layout layout = Layout::bhsd);
  // Same values, other layout (the storage order changes, the logical tensor does not).
  HostTensor relayout(Layout layout) const;
  // Values in logical [b][h][s][c] order, whatever the strides.
  std::vector<double> logical() const;
};

// Elements a buffer with these strides must hold: the largest offset + 1.
long long storage_size(const Shape& shape, const Strides& strides);

}  // namespace test
}  // namespace qattn
