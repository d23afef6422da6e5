// A float64 simulator of quantized attention as SageAttention2 and INT-FlashAttention describe it. No GPU,
// no qattn kernels: it answers "how much error does this quantization scheme itself cause", with every
// other rounding (accumulators, exp) exact. Two users: the accuracy table (bench/accuracy_table.cpp) and
// the runtime's accuracy gate (runtime/tuning/accuracy_gate.hpp), which holds a kernel of a lossy format
// to what the format itself costs on the gate's data rather than to a fixed floor.
//
// Per head, matrices are [rows][d] row-major. Quantization is symmetric round-to-nearest-even:
//   scale = amax(group) / qmax,  code = clamp(rne(x / scale), -qmax, qmax),  x̂ = code * scale
// with qmax = 127 (INT8) or 7 (INT4, the [-7, 7] range of SageAttention2 §2.2); an all-zero group has
// scale 0 and codes 0. Scale groups (the row -> group maps are in scale_group(); docs in the .cpp):
//   per_tensor  the whole head (or, with SimConfig::q_amax / k_amax / v_amax, the whole tensor)
//   per_block   Q: b_q rows (SimConfig::q_block, 128 in SageAttention, 64 in qattn's kernels),
//               K: 64 keys (b_kv)                                             (SageAttention §2.3)
//   per_warp    Q: 32 rows = b_q / c_w with 4 warps; K: per 64-key block     (SageAttention2 §3.2, Alg. 1)
//   per_thread  Q: 8 groups per 32-row warp tile, K: 4 groups per 64-key tile, following the m16n8
//               mma fragments so each thread needs one Q and one K scale     (SageAttention2 code, digest §9.2)
//   per_token   one row
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qattn::reference::sim {

struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(int r, int c) : rows(r), cols(c), v(static_cast<size_t>(r) * c, 0.0) {}
  double& at(int r, int c) { return v[static_cast<size_t>(r) * cols + c]; }
  double at(int r, int c) const { return v[static_cast<size_t>(r) * cols + c]; }
  const double* row(int r) const { return v.data() + static_cast<size_t>(r) * cols; }
};

enum class Gran { per_tensor, per_block, per_warp, per_thread, per_token };
enum class Role { q, k };   // the group shapes of Q rows and K rows differ
const char* to_string(Gran g);

constexpr int kBlockQ = 128, kWarpQ = 32, kBlockK = 64;

// Scale group of row `r` (a query for Role::q, a key for Role::k); q_block: rows of a per_block Q group.
int scale_group(Gran g, Role role, int r, int q_block = kBlockQ);

struct Quantized {
  Mat deq;                      // code * scale of the group
  std::vector<int> codes;       // [rows][d]
  std::vector<double> scales;   // by group index
};
// tensor_amax > 0 (per_tensor only): the abs-max of a tensor larger than x (all its heads and batches),
// which then sets the one scale instead of x's own.
Quantized quantize_int(const Mat& x, Gran g, Role role, int qmax, int q_block = kBlockQ, double tensor_amax = 0);

// The same groups with e4m3 codes: scale = amax(group) / 448, x̂ = e4m3(x / scale) * scale (round_e4m3);
// the dequantized values.
Mat quantize_e4m3(const Mat& x, Gran g, Role role, int q_block = kBlockQ, double tensor_amax = 0);

// Round to the nearest fp16 / FP8 E4M3 (e4m3fn: max 448, subnormal step 2^-9) value, ties to even;
// E4M3 saturates to +-448 like cvt.satfinite, fp16 overflows to inf.
double round_fp16(double x);
double round_e4m3(double x);

// Every row through the signed Hadamard rotation of quant_config.h as the kernels apply it: Q side (H S x)
// or K side (H S x / B), so that rotated Q rows · rotated K rows equal the originals' dot products.
Mat rotate_rows(const Mat& x, Role side);

// Per-channel mean over rows; x minus it.
std::vector<double> channel_mean(const Mat& x);
Mat subtract(const Mat& x, const std::vector<double>& mean);

// ---- attention ------------------------------------------------------------------------------------------

enum class PFormat {
  exact,           // P̃ in float64
  int8_paper,      // INT-FA Alg. 1: P̂ = round(127 P̃), the row sum l accumulates P̂
  fp16,            // P̃ rounded to fp16 (half-INT8, SageAttention v1), l from the unrounded P̃
  e4m3_scaled,     // SageAttention2 §3.5: e4m3(448 P̃) / 448, l from the unquantized P̃ (Alg. 1)
  e4m3_unscaled,   // P̃ cast to e4m3 as is (an FP8 FlashAttention-3 style baseline; assumption, see table)
};
enum class VFormat { exact, fp16, int8_per_tensor, int8_per_channel, e4m3_per_channel, e4m3_per_tensor };

struct SimConfig {
  int qk_qmax = 0;             // 0: Q and K exact; 127 INT8; 7 INT4
  Gran gran = Gran::per_token;   // of both Q and K (K's per_warp is per-block, see above)
  bool smooth_k = false;       // K - mean_tokens(K): softmax-invariant
  bool smooth_q = false;       // Q - mean of its q_block-row block, plus ΔS = mean · K'ᵀ in float64
  bool delta_s_from_codes = false;   // ΔS = mean · K̂ᵀ from K's quantized values (qattn's kernels: one more
                                     // mma on the K codes) instead of the exact K'; rotated like K when rotate
  bool qk_fp8 = false;         // Q and K as e4m3 codes (scale amax(group) / 448, groups by `gran`) instead of integers
  bool rotate = false;         // Q and K (after smoothing) through the signed Hadamard rotation of
                               // quant_config.h before quantization (QuaRot; SageAttention2's HadmdAttn)
  PFormat p = PFormat::exact;
  VFormat v = VFormat::exact;
  bool smooth_v = false;       // V - mean_tokens(V), mean added back to O
  int block_kv = 64;           // keys per online-softmax tile (P is quantized per tile, vs the running max)
  int q_block = kBlockQ;       // Q rows of a per_block scale group and of a smoothing-mean block
  bool causal = false;         // row r of an n_q-row Q sees keys j <= r + n_k - n_q (aligned bottom-right);
                               // a row that sees no key outputs 0
  // Per-tensor scales over a whole tensor of several heads (qattn's per_tensor: one scale for every batch
  // and head): the abs-max of every head's quantized operand (operand_amax()), 0: the head's own.
  double q_amax = 0, k_amax = 0, v_amax = 0;
};

// The abs-max of the operands one head quantizes under `config` (Q and K after smoothing and rotation, V
// after smoothing), for the tensor-wide per_tensor scale: the max over heads goes into q_amax / k_amax /
// v_amax.
struct OperandAmax {
  double q = 0, k = 0, v = 0;
};
OperandAmax operand_amax(const Mat& q, const Mat& k, const Mat& v, const SimConfig& config);

// Output rows `rows` of softmax(scale · Q Kᵀ) V for one head, through the simulated pipeline. Quantization
// groups, smoothing means and V scales cover every row of q, k and v (a causal mask hides keys from the
// softmax, not from the statistics: the quantization passes see the whole tensors too).
// (Q smoothing and Q scales are computed over the whole Q, so sampling rows changes nothing else.)
Mat simulate_attention(const Mat& q, const Mat& k, const Mat& v, const std::vector<int>& rows, double scale,
                       const SimConfig& config);
// Exact float64 attention of the same rows: the shared reference (reference/attention.hpp).
Mat reference_attention(const Mat& q, const Mat& k, const Mat& v, const std::vector<int>& rows, double scale);
// softmax(scale · Q Kᵀ) of the given rows, [rows.size()][k.rows] (tests of the smoothing identities).
Mat softmax_scores(const Mat& q, const Mat& k, const std::vector<int>& rows, double scale);

struct Errors {
  double cosine = 0, rel_l1 = 0, rmse = 0;
  double mre_elementwise = 0;   // mean |Δ| / |ref| over elements with |ref| >= 1e-3 * rms(ref)
};
// cosine, rel_l1 and rmse as reference/metrics.hpp computes them, plus the elementwise mean relative error.
Errors compare(const Mat& ref, const Mat& got);

// ---- inputs ---------------------------------------------------------------------------------------------

enum class Dist { normal, uniform };   // N(0, 1) or U(-0.5, 0.5)
struct Outliers {
  std::vector<int> scaled;          // channels multiplied by `scale`
  double scale = 10;
  std::vector<int> biased;          // channels offset by +-U(bias_lo, bias_hi), sign and size fixed per channel
  double bias_lo = 0, bias_hi = 0;
};
// [rows][d]; the outlier channels and their offsets come from `seed` too, so Q/K/V of one dataset share them
// across heads when given the same `channel_seed`.
Mat random_matrix(int rows, int d, Dist dist, const Outliers& o, std::uint64_t seed, std::uint64_t channel_seed);
// Inputs as the GPU sees them: every element rounded to fp16.
void round_all_fp16(Mat& x);

}  // namespace qattn::reference::sim
