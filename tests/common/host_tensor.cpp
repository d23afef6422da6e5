#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

Strides dense_strides(const Shape& s, Layout layout) {
  Strides st;
  st.sc = 1;
  if (layout == Layout::bhsd) {
    st.ss = s.dim;
    st.sh = 1LL * s.seq * s.dim;
    st.sb = 1LL * s.heads * s.seq * s.dim;
  } else {
    st.sh = s.dim;
    st.ss = 1LL * s.heads * s.dim;
    st.sb = 1LL * s.seq * s.heads * s.dim;
  }
  return st;
}

const char* to_string(Layout layout) { return layout == Layout::bhsd ? "bhsd" : "bshd"; }

long long storage_size(const Shape& s, const Strides& st) {
  if (s.numel() == 0) return 0;
  return (s.batch - 1) * st.sb + (s.heads - 1) * st.sh + (s.seq - 1) * st.ss + (s.dim - 1) * st.sc + 1;
}

HostTensor HostTensor::zeros(const Shape& shape, Layout layout) {
  HostTensor t;
  t.shape = shape;
  t.strides = dense_strides(shape, layout);
  t.data.assign(static_cast<size_t>(storage_size(shape, t.strides)), 0.0);
  return t;
}

HostTensor HostTensor::relayout(Layout layout) const {
  HostTensor out = zeros(shape, layout);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int s = 0; s < shape.seq; ++s)
        for (int c = 0; c < shape.dim; ++c) out.at(b, h, s, c) = at(b, h, s, c);
  return out;
}

std::vector<double> HostTensor::logical() const {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(shape.numel()));
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int s = 0; s < shape.seq; ++s)
        for (int c = 0; c < shape.dim; ++c) v.push_back(at(b, h, s, c));
  return v;
}

}  // namespace test
}  // namespace qattn
