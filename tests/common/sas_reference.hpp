// Host emulation of the device's SAS exponential (templates/qattn/decode/sas.h), step for step: the
// split in fp32, then every fp16 operation as the exact result (double holds it) rounded once to fp16,
// which is what fma.rn.f16 / mul.rn.f16 do.
#pragma once

namespace qattn {
namespace test {

double sas_exp(float x);   // x <= 0; exactly 0 at or below -6 (and for -inf)

}  // namespace test
}  // namespace qattn
