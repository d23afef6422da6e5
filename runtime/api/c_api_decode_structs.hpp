// The C API's cache structs translated into the C++ views (runtime/api/c_api_decode.cpp,
// c_api_flashq.cpp).
#pragma once
#include "qattn/decode.hpp"
#include "qattn/flashq.hpp"
#include "runtime/api/c_api_internal.hpp"

namespace qattn::capi {

KvCacheView kv_view_of(const qattn_kv_cache& c);
// Reads the host bit arrays (heads_kv entries each); with `zeros_mean_choose`, an array of zeros becomes
// "not given" (flashq_prefill chooses those bits).
FlashQCacheView flashq_view_of(const qattn_flashq_cache& c, int heads_kv, const char* what, bool zeros_mean_choose = false);

}  // namespace qattn::capi
