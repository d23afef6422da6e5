#include "tests/common/reference_attention.hpp"

#include <stdexcept>
#include <string>

namespace qattn {
namespace test {

namespace {

void check_shapes(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  const Shape &sq = q.shape, &sk = k.shape, &sv = v.shape;
  if (sq.batch != sk.batch || sk.batch != sv.batch)
    throw std::invalid_argument("reference_attention: q, k, v batch sizes differ");
  if (sk.heads != sv.heads || sk.seq != sv.seq)
    throw std::invalid_argument("reference_attention: k and v differ in heads or length");
  if (sq.dim != sk.dim) throw std::invalid_argument("reference_attention: q and k head dims differ");
  if (sk.heads < 1 || sq.heads % sk.heads != 0)
    throw std::invalid_argument("reference_attention: heads_q " + std::to_string(sq.heads) +
                                " is not a multiple of heads_kv " + std::to_string(sk.heads));
}

}  // namespace

reference::Operand operand(const HostTensor& t) {
  return reference::Operand::of(t.data.data(), {t.strides.sb, t.strides.sh, t.strides.ss, t.strides.sc});
}

HostTensor reference_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const AttentionConfig& config, std::vector<double>* lse, Layout out_layout) {
  check_shapes(q, k, v);
  const reference::Dims dims{q.shape.batch, q.shape.heads, k.shape.heads, q.shape.seq,
                             k.shape.seq,   q.shape.dim,   v.shape.dim};
  const std::vector<double> rows =
      reference::attention(operand(q), operand(k), operand(v), dims, {config.causal, config.softmax_scale}, lse);
  HostTensor o = HostTensor::zeros(Shape{q.shape.batch, q.shape.heads, q.shape.seq, v.shape.dim}, out_layout);
  size_t at = 0;   // rows come in [b][h][i] order
  for (int b = 0; b < dims.batch; ++b)
    for (int h = 0; h < dims.heads_q; ++h)
      for (int i = 0; i < dims.q_len; ++i)
        for (int c = 0; c < dims.dv; ++c) o.at(b, h, i, c) = rows[at++];
  return o;
}

}  // namespace test
}  // namespace qattn
