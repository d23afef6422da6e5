// Float64 attention: the reference every accuracy check compares a kernel against.
//   q: [batch, heads_q, q_len, d]   k: [batch, heads_kv, kv_len, d]   v: [batch, heads_kv, kv_len, dv]
// Each operand is a strided view (element (b, h, s, c) at data[b*sb + h*sh + s*ss + c*sc]), so
// [b,h,s,d] and [b,s,h,d] inputs, float or double, are read in place: the core knows no layout.
//   GQA: query head h reads KV head h / (heads_q / heads_kv).
//   Causal masks align bottom-right: query i sees keys j <= i + kv_len - q_len. A row that sees no key
//   (q_len > kv_len) gets output 0 and LSE -inf.
//   LSE is the natural log of sum_j exp(scale * q.k_j).
// The arithmetic of one row is sequential and fixed (attend_row), so a result does not depend on the
// thread count, and other references built on attend_row (the decode and FlashQ cache models in tests/)
// agree with this one to the last bit on equal inputs.
#pragma once
#include <vector>

namespace qattn::reference {

struct Strides {
  long long sb = 0, sh = 0, ss = 0, sc = 1;
};
// Dense strides of a [batch, heads, seq, dim] tensor stored [b,h,s,d] or [b,s,h,d].
Strides bhsd_strides(int heads, int seq, int dim);
Strides bshd_strides(int heads, int seq, int dim);

// A read-only strided operand holding float64 or float32 values (exactly one pointer set).
struct Operand {
  const double* f64 = nullptr;
  const float* f32 = nullptr;
  Strides strides;

  static Operand of(const double* data, Strides s) { return {data, nullptr, s}; }
  static Operand of(const float* data, Strides s) { return {nullptr, data, s}; }
  double at(int b, int h, int s, int c) const {
    const long long i = b * strides.sb + h * strides.sh + s * strides.ss + c * strides.sc;
    return f64 ? f64[i] : static_cast<double>(f32[i]);
  }
};

struct Dims {
  int batch = 1, heads_q = 1, heads_kv = 1, q_len = 1, kv_len = 1, d = 1, dv = 1;
};

struct Options {
  bool causal = false;
  double softmax_scale = 0.0;   // 0: 1 / sqrt(d)
};

// A query row: batch, query head, position.
struct RowId {
  int b = 0, h = 0, i = 0;
};

// Keys query row i may see: [0, visible_keys(i)); may be <= 0 (then none).
long long visible_keys(int i, int q_len, int kv_len, bool causal);

// Softmax attention of one query row qi[d] over the first n rows of contiguous k[n][d] and v[n][dv]
// (two passes: max, then exp-sum and the weighted V sum divided once by the sum). Writes out[dv] (zeros
// when n <= 0) and returns the LSE (-inf when n <= 0).
double attend_row(const double* qi, const double* k, const double* v, long long n, int d, int dv, double scale,
                  double* out);

// The listed rows, in any order (rows of one head next to each other share one copy of its K/V rows).
// Returns rows.size() x dv values, row by row; LSE per row when lse is given. Throws
// std::invalid_argument on inconsistent dims or a row outside them.
std::vector<double> attention_rows(const Operand& q, const Operand& k, const Operand& v, const Dims& dims,
                                   const Options& options, const std::vector<RowId>& rows,
                                   std::vector<double>* lse = nullptr);

// Up to max_heads (batch, head) pairs times up to max_rows rows each, spread evenly with the first and
// the last included (the causal edge cases): a float64 check of a large problem in a second, not minutes.
std::vector<RowId> sample_rows(const Dims& dims, int max_heads, int max_rows);

// Every row, in [b][h][i] order: batch * heads_q * q_len rows of dv values (LSE likewise).
std::vector<RowId> all_rows(const Dims& dims);
std::vector<double> attention(const Operand& q, const Operand& k, const Operand& v, const Dims& dims,
                              const Options& options, std::vector<double>* lse = nullptr);

}  // namespace qattn::reference
