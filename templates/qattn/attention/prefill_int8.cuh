// Quantized prefill attention, every Q/K and P·V format in one kernel template: INT8 Q·K^T (or packed
// INT4) and u8 P̂ · int8 V̂ with an int32 O (INT-FlashAttention), fp16 or fp8 P·V, Q smoothing, fused Q,
// in the mma.sync form (sm_80+) or the wgmma form (sm_90a). docs/design/prefill-kernels.md ("How the
// INT8 kernel computes") gives the numerics, the schedule, each format and the requirements on the
// tensors.
//
// Kernel<Cfg> takes one configuration struct (prefill_int8/config.cuh). Its body is made of the parts
// in prefill_int8/, each included inside the class so that they share its constants and types:
// the configuration and per-format traits, the layout, the producer (K/V loads), the consumer
// (Q·K^T, softmax, P·V, Q smoothing, one tile's step), the epilogue, the fused-Q prologue, the entry
// with the main loop, and the warp-specialized entry (a producer warpgroup feeding consumer warpgroups,
// sm_90a). A new P·V format touches format_traits.cuh, pv.cuh and the generator's
// candidate table.
#pragma once

#include "qattn/abi.h"
#include "qattn/attention/prefill_int8_shape.h"
#include "qattn/attention/tile_order.h"
#include "qattn/common/common.cuh"
#include "qattn/common/fp8_cvt.cuh"
#include "qattn/common/int8_ptx.cuh"
#include "qattn/common/tma.cuh"
#include "qattn/common/warp_roles.cuh"
#include "qattn/common/wgmma.cuh"
#include "qattn/quant/quant_device.cuh"
#include "qattn/attention/prefill_int8/config.cuh"
#include "qattn/attention/prefill_int8/numerics.cuh"

namespace qattn {
namespace prefill_int8 {

template <class Cfg>
struct Kernel {
#include "qattn/attention/prefill_int8/config_members.cuh"
#include "qattn/attention/prefill_int8/format_traits.cuh"
#include "qattn/attention/prefill_int8/layout.cuh"
#include "qattn/attention/prefill_int8/kv_loads.cuh"
#include "qattn/attention/prefill_int8/scores.cuh"
#include "qattn/attention/prefill_int8/softmax.cuh"
#include "qattn/attention/prefill_int8/pv.cuh"
#include "qattn/attention/prefill_int8/q_smoothing.cuh"
#include "qattn/attention/prefill_int8/tile_step.cuh"
#include "qattn/attention/prefill_int8/epilogue.cuh"
#include "qattn/attention/prefill_int8/fused_q.cuh"
#include "qattn/attention/prefill_int8/run.cuh"
#include "qattn/attention/prefill_int8/warp_specialized.cuh"
};

}  // namespace prefill_int8
}  // namespace qattn
