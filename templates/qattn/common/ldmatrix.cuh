// ldmatrix: a warp loads 8x8 tiles of 16-bit elements (8 rows of 16 bytes) from shared memory
// straight into mma fragment layout. Lanes 8i..8i+7 supply the row addresses of tile i (x1 uses
// lanes 0..7, x2 lanes 0..15, x4 all 32); every lane must pass a valid address for the tiles it
// addresses. Result register i holds tile i: lane 4g+t gets row g, elements 2t and 2t+1.
// The .trans forms transpose each tile on the way (lane 4g+t gets column g, rows 2t and 2t+1),
// which turns a row-major [k][n] tile into the "col" B operand of mma.
// Addresses are 32-bit shared-window addresses (see smem_addr in cp_async.cuh), 16-byte aligned.
#pragma once
#include "qattn/common/types.cuh"

namespace qattn::dev {

__device__ __forceinline__ void ldmatrix_x1(u32 (&r)[1], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x1_trans(u32 (&r)[1], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

}  // namespace qattn::dev
