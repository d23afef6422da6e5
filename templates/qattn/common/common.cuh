// Everything under qattn/common/ in one include: device types, conversions, mma, ldmatrix,
// cp.async, fast math and swizzle helpers (namespace qattn::dev).
#pragma once
#include "qattn/common/types.cuh"
#include "qattn/common/convert.cuh"
#include "qattn/common/mma.cuh"
#include "qattn/common/ldmatrix.cuh"
#include "qattn/common/cp_async.cuh"
#include "qattn/common/math.cuh"
#include "qattn/common/swizzle.cuh"
