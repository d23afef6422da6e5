/* Host helpers of the C API test program's GPU part (see c_api_host.h). */
#define _POSIX_C_SOURCE 200809L   /* dlopen */
#include "c_api_host.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_api_check.h"

/* The few driver entry points the test needs, with the driver's ABI (CUresult is an int). */
static int (*cu_init)(unsigned);
static int (*cu_device_get)(int*, int);
static int (*cu_primary_retain)(void**, int);
static int (*cu_ctx_set_current)(void*);
static int (*cu_mem_alloc)(devptr*, size_t);
static int (*cu_mem_free)(devptr);
static int (*cu_htod)(devptr, const void*, size_t);
static int (*cu_dtoh)(void*, devptr, size_t);
static int (*cu_memset8)(devptr, unsigned char, size_t);
static int (*cu_ctx_sync)(void);

static int bind(void* lib, const char* name, void* slot) {
  void* fn = dlsym(lib, name);
  memcpy(slot, &fn, sizeof fn);   /* object pointer to function pointer without a cast C forbids */
  return fn != NULL;
}

int cuda_open(char* why, size_t why_len) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* ctx = NULL;
  int device = 0, rc;
  if (!lib) {
    snprintf(why, why_len, "no CUDA driver (dlopen libcuda.so.1 failed)");
    return -1;
  }
  if (!bind(lib, "cuInit", &cu_init) || !bind(lib, "cuDeviceGet", &cu_device_get) ||
      !bind(lib, "cuDevicePrimaryCtxRetain", &cu_primary_retain) || !bind(lib, "cuCtxSetCurrent", &cu_ctx_set_current) ||
      !bind(lib, "cuMemAlloc_v2", &cu_mem_alloc) || !bind(lib, "cuMemFree_v2", &cu_mem_free) ||
      !bind(lib, "cuMemcpyHtoD_v2", &cu_htod) || !bind(lib, "cuMemcpyDtoH_v2", &cu_dtoh) ||
      !bind(lib, "cuMemsetD8_v2", &cu_memset8) || !bind(lib, "cuCtxSynchronize", &cu_ctx_sync)) {
    snprintf(why, why_len, "the CUDA driver lacks an entry point the test uses");
    return -1;
  }
  if ((rc = cu_init(0)) != 0 || (rc = cu_device_get(&device, 0)) != 0) {
    snprintf(why, why_len, "no usable CUDA device (driver error %d)", rc);
    return -1;
  }
  if ((rc = cu_primary_retain(&ctx, device)) != 0 || (rc = cu_ctx_set_current(ctx)) != 0) {
    snprintf(why, why_len, "cannot make device 0's primary context current (driver error %d)", rc);
    return -1;
  }
  return 0;
}

devptr dev_alloc(size_t bytes) {
  devptr p = 0;
  const int rc = cu_mem_alloc(&p, bytes);
  CHECK(rc == 0);
  return rc == 0 ? p : 0;
}

void dev_free(devptr p) {
  if (p) CHECK(cu_mem_free(p) == 0);
}
void dev_upload(devptr dst, const void* src, size_t bytes) { CHECK(cu_htod(dst, src, bytes) == 0); }
void dev_download(void* dst, devptr src, size_t bytes) { CHECK(cu_dtoh(dst, src, bytes) == 0); }
void dev_fill(devptr dst, unsigned char byte, size_t bytes) { CHECK(cu_memset8(dst, byte, bytes) == 0); }
void dev_sync(void) { CHECK(cu_ctx_sync() == 0); }

uint16_t float_to_half(float f) {
  uint32_t x, mant, h, rem, halfway;
  int exp, shift;
  uint16_t sign;
  memcpy(&x, &f, sizeof x);
  sign = (uint16_t)((x >> 16) & 0x8000u);
  mant = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
  exp = (int)((x >> 23) & 0xffu) - 127 + 15;
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {   /* fp16 subnormal: value = m * 2^-24 */
    if (exp < -10) return sign;
    mant |= 0x800000u;
    shift = 14 - exp;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1);
  } else {
    h = ((uint32_t)exp << 10) | (mant >> 13);
    rem = mant & 0x1fffu;
    halfway = 0x1000u;
  }
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;   /* round to nearest even; may carry into the exponent */
  return (uint16_t)(sign | h);
}

float half_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) f = ldexpf((float)mant, -24);
  else if (exp == 31) f = mant ? NAN : INFINITY;
  else f = ldexpf((float)(mant | 0x400u), exp - 25);
  return (h & 0x8000u) ? -f : f;
}

double next_normal(uint64_t* state) {
  double u[2];
  int i;
  for (i = 0; i < 2; ++i) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    u[i] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0;   /* (0, 1) */
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

metrics compare(const double* ref, const double* got, size_t n) {
  metrics m = {0, 0, 0, 0};
  double dot = 0, rr = 0, gg = 0, dd = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double d = got[i] - ref[i];
    if (!isfinite(got[i])) {
      ++m.non_finite;
      continue;
    }
    dot += ref[i] * got[i];
    rr += ref[i] * ref[i];
    gg += got[i] * got[i];
    dd += d * d;
    if (fabs(d) > m.max_abs) m.max_abs = fabs(d);
  }
  m.cosine = dot / (sqrt(rr * gg) + 1e-300);
  m.rel_l2 = sqrt(dd / (rr + 1e-300));
  return m;
}
