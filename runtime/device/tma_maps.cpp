#include "runtime/device/tma_maps.hpp"

#include "qattn/error.hpp"
#include "runtime/device/driver.hpp"

namespace qattn::rt {

namespace {

long long round_up(long long x, long long m) { return (x + m - 1) / m * m; }

bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

std::string k_error(const Spec& spec, const AttentionParams& p) {
  const TensorRef& k = p.k;
  const long long group = 16 * k.ss;
  if (!aligned16(k.ptr) || k.sc != 1 || k.ss % 16 != 0 || k.ss < spec.head_dim)
    return "K rows must be int8 channels in a row (sc = 1), 16-byte aligned rows apart (ss a multiple of 16)";
  const long long rows16 = round_up(p.kv_len, 16) * k.ss;   // what each head's last group of 16 reads
  if ((p.heads_kv > 1 && (k.sh % group != 0 || k.sh < rows16)) ||
      (p.batch > 1 && (k.sb % group != 0 || k.sb < (p.heads_kv - 1) * k.sh + rows16)))
    return "every (batch, head) of K must start at a multiple of 16 rows and hold kv_len rounded up to 16 rows "
           "(a [b, h, s, d] layout with s padded to 16)";
  return "";
}

std::string v_error(const AttentionParams& p) {
  const TensorRef& v = p.v;
  if (!aligned16(v.ptr) || v.ss != 1 || v.sc % 16 != 0)
    return "V^T rows must be tokens in a row (ss = 1), 16-byte aligned rows apart (sc a multiple of 16)";
  if ((p.heads_kv > 1 && v.sh % v.sc != 0) || (p.batch > 1 && v.sb % v.sc != 0))
    return "every (batch, head) of V^T must start at a whole row (sh and sb multiples of sc)";
  return "";
}

}  // namespace

TmaPlans plan_tma_maps(const Spec& spec, const Tiling& tiling, const AttentionParams& p, std::string* why) {
  std::string error = k_error(spec, p);
  if (error.empty()) error = v_error(p);
  if (!error.empty()) {
    if (why) *why = "tiling " + to_string(tiling) + " loads K and V^T with TMA: " + error +
                    "; the runtime's own workspace (attention(), prepare(), prepare_with()) always is";
    return {};
  }
  const int d = spec.head_dim, bn = tiling.block_n;
  TmaPlans plans;
  const TensorRef& k = p.k;
  const long long k_rows = ((p.batch - 1) * k.sb + (p.heads_kv - 1) * k.sh) / k.ss + round_up(p.kv_len, 16);
  const auto ss = static_cast<std::uint64_t>(k.ss);
  plans.k = TmaMapPlan{k.ptr, 5,
                       {static_cast<std::uint64_t>(d), 2, 4, 2, static_cast<std::uint64_t>(k_rows / 16)},
                       {ss, 4 * ss, 2 * ss, 16 * ss},
                       {static_cast<std::uint32_t>(d), 2, 4, 2, static_cast<std::uint32_t>(bn / 16)},
                       d};
  const TensorRef& v = p.v;
  const long long v_rows = ((p.batch - 1) * v.sb + (p.heads_kv - 1) * v.sh) / v.sc + d;
  plans.v = TmaMapPlan{v.ptr, 2,
                       {static_cast<std::uint64_t>(p.kv_len), static_cast<std::uint64_t>(v_rows), 0, 0, 0},
                       {static_cast<std::uint64_t>(v.sc), 0, 0, 0},
                       {static_cast<std::uint32_t>(bn), static_cast<std::uint32_t>(d), 0, 0, 0},
                       bn};
  if (why) why->clear();
  return plans;
}

namespace {

TmaMap encode(const TmaMapPlan& plan, const char* what) {
  const DriverApi& api = driver();
  if (!api.cuTensorMapEncodeTiled)
    throw DriverError("cuTensorMapEncodeTiled", CUDA_ERROR_NOT_SUPPORTED,
                      "the driver has no cuTensorMapEncodeTiled; run the tiling without _tma (QATTN_TMA=0)");
  // The driver's type may be over-aligned (128 bytes in CUDA 13's cuda.h); the TMA unit needs 64, which
  // TmaMap has, so the map is encoded here and copied into the parameter.
  static_assert(sizeof(TmaMap) == sizeof(CUtensorMap), "TmaMap must be a CUtensorMap");
  CUtensorMap map;
  const std::uint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = api.cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(plan.rank), const_cast<void*>(plan.base),
      plan.dims.data(), plan.strides.data(), plan.box.data(), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      plan.swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  check(r, what);
  TmaMap out;
  __builtin_memcpy(out.opaque, &map, sizeof(map));
  return out;
}

}  // namespace

TmaAttentionParams tma_params(const Spec& spec, const Tiling& tiling, const AttentionParams& p) {
  std::string why;
  const TmaPlans plans = plan_tma_maps(spec, tiling, p, &why);
  if (!why.empty()) throw_bad_input(why);
  TmaAttentionParams out;
  out.k_map = encode(plans.k, "cuTensorMapEncodeTiled (K)");
  out.v_map = encode(plans.v, "cuTensorMapEncodeTiled (V^T)");
  out.a = p;
  return out;
}

}  // namespace qattn::rt
