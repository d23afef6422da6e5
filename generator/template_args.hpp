// The C++ spelling of qattn's enums as template arguments of the kernel bodies ("qattn::Fmt::fp16").
#pragma once
#include "qattn/abi.h"

namespace qattn::gen::template_args {

inline const char* fmt_enum(Fmt f) {
  switch (f) {
    case Fmt::fp16: return "qattn::Fmt::fp16";
    case Fmt::bf16: return "qattn::Fmt::bf16";
    case Fmt::int8: return "qattn::Fmt::int8";
    case Fmt::int4: return "qattn::Fmt::int4";
    case Fmt::fp8e4m3: return "qattn::Fmt::fp8e4m3";
    case Fmt::flashq: return "qattn::Fmt::flashq";
  }
  return "";
}

inline const char* gran_enum(Gran g) {
  switch (g) {
    case Gran::none: return "qattn::Gran::none";
    case Gran::per_tensor: return "qattn::Gran::per_tensor";
    case Gran::per_block: return "qattn::Gran::per_block";
    case Gran::per_warp: return "qattn::Gran::per_warp";
    case Gran::per_thread: return "qattn::Gran::per_thread";
    case Gran::per_token: return "qattn::Gran::per_token";
    case Gran::per_channel: return "qattn::Gran::per_channel";
    case Gran::per_group: return "qattn::Gran::per_group";
    case Gran::per_head: return "qattn::Gran::per_head";
  }
  return "";
}

inline const char* softmax_enum(SoftmaxMode m) {
  switch (m) {
    case SoftmaxMode::exact: return "qattn::SoftmaxMode::exact";
    case SoftmaxMode::unified_max: return "qattn::SoftmaxMode::unified_max";
    case SoftmaxMode::sas: return "qattn::SoftmaxMode::sas";
  }
  return "";
}

inline const char* accum_enum(Accum a) {
  switch (a) {
    case Accum::fp32: return "qattn::Accum::fp32";
    case Accum::fp16: return "qattn::Accum::fp16";
    case Accum::two_level: return "qattn::Accum::two_level";
  }
  return "";
}

inline const char* flag(bool b) { return b ? "true" : "false"; }

}  // namespace qattn::gen::template_args
