// A host tensor copied to the device in an element type, and its view as the attention API takes it
// (the host tensor's strides; elements contiguous along the head dimension), and a call's three inputs.
#pragma once

#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/random_data.hpp"

namespace qattn::test {

inline rt::DeviceBuffer upload(const HostTensor& t, Fmt fmt) { return rt::DeviceBuffer::from(encode(t, fmt)); }

inline TensorView view_of(const rt::DeviceBuffer& b, const HostTensor& t) {
  return TensorView{b.as<void>(), t.strides.sb, t.strides.sh, t.strides.ss};
}

// Q, K and V on the device (in the spec's output type) and the call that reads them; the caller adds
// o (and lse).
struct Uploaded {
  rt::DeviceBuffer q, k, v;
  AttentionCall call;
};

inline Uploaded upload_call(const Spec& spec, const Problem& p, const HostTensor& q, const HostTensor& k,
                            const HostTensor& v) {
  Uploaded u{upload(q, spec.out), upload(k, spec.out), upload(v, spec.out), AttentionCall{}};
  u.call.spec = spec;
  u.call.problem = p;
  u.call.q = view_of(u.q, q);
  u.call.k = view_of(u.k, k);
  u.call.v = view_of(u.v, v);
  return u;
}

}  // namespace qattn::test
