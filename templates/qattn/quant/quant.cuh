// The quantization passes, for a rendered translation unit to #include "qattn/quant/quant.cuh".
// Which passes to launch, in which order, with which grids: see generator/quant_plan.hpp.
#pragma once

#include "qattn/quant/block_mean.cuh"
#include "qattn/quant/finalize_pass.cuh"
#include "qattn/quant/quantize_rows.cuh"
#include "qattn/quant/quantize_transposed.cuh"
#include "qattn/quant/stats_pass.cuh"
