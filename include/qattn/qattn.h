/* qattn C API: quantized attention kernels compiled on demand. extern "C", no C++ types.
 *
 * Every call returns a qattn_status; on failure qattn_last_error() gives a one-line message (per thread,
 * valid until the next qattn call on that thread). Status values equal the CLI exit codes.
 * Tensors are device pointers with element strides: element (b, h, s, c) at
 * data + b*sb + h*sh + s*ss + c. Their element type is the spec's out= type (fp16 or bf16).
 * Streams are CUstream values (NULL: the legacy default stream); every launch is asynchronous.
 *
 * Threads: calls on one qattn_runtime may come from several threads at once (the runtime serializes
 * what must be: its kernel table, the cache's connection). qattn_runtime_destroy must not race with any
 * other call on that runtime or on a qattn_prepared made from it, and must come after every such
 * qattn_prepared is destroyed: the caller waits for calls in flight (the Python wrapper's close() does).
 * A qattn_prepared is used by one thread at a time (qattn_run_prepared writes its workspace), and
 * qattn_prepared_destroy must not race with a call on it. qattn_last_error() is per thread. Several
 * processes may share one cache file: a lock held by another process costs one operation at most
 * ~10 s, after which this runtime stops using that file (qattn_cache_status says so). */
#ifndef QATTN_QATTN_H_
#define QATTN_QATTN_H_

#include <stddef.h>
#include <stdint.h>

#include "qattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qattn_status {
  QATTN_OK = 0,
  QATTN_ERROR = 1,       /* compile, launch or cache failure */
  QATTN_BAD_INPUT = 2,   /* the request is malformed or unsupported: the message says what is accepted */
  QATTN_NO_GPU = 3       /* the operation needs a CUDA driver and device and there is none */
} qattn_status;

typedef struct qattn_runtime qattn_runtime;
typedef struct qattn_prepared qattn_prepared;

typedef struct qattn_tensor {
  void* data;
  int64_t sb, sh, ss; /* strides in elements of batch, head and sequence; the head-dim stride is 1 */
} qattn_tensor;

typedef struct qattn_shape {
  int batch, heads_q, heads_kv, q_len, kv_len;
} qattn_shape;

typedef struct qattn_runtime_options {
  const char* cache_path; /* NULL: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db */
  int use_cache;          /* 0: no SQLite at all */
  int read_only;          /* 1: open the cache read-only */
  int tune;               /* 1: tune on a miss; 0: default tiling */
  int device;             /* CUDA device ordinal */
} qattn_runtime_options;

/* Versioned runtime options (qattn_runtime_open). struct_size comes first: the caller sets it to
 * sizeof(qattn_options) of the header it was compiled with (qattn_options_init does, with every default).
 * The library reads the fields that fit in struct_size and takes the defaults for the others, so a
 * program built against an older header works with a newer library; a program built against a newer
 * header works with an older library as long as the fields that library does not know are zero, else
 * QATTN_BAD_INPUT. Later versions only append fields, each on an 8-byte boundary, with zero meaning
 * their default. The same rule holds for every struct below that starts with struct_size. */
typedef struct qattn_options {
  size_t struct_size;
  const char* cache_path;          /* NULL: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db */
  int use_cache;                   /* 0: no SQLite at all (default 1) */
  int read_only;                   /* 1: open the user cache read-only (default 0) */
  int tune;                        /* 1: tune on a miss (default); 0: default tiling */
  int device;                      /* CUDA device ordinal (default 0) */
  /* An application-shipped cache opened read-only under the user cache: lookups try the user cache
   * first, then this one; writes go to the user cache only. NULL or "": $QATTN_SHIPPED_CACHE, else none. */
  const char* shipped_cache_path;
} qattn_options;

/* Library version, e.g. "0.1.0". */
QATTN_API const char* qattn_version(void);
QATTN_API const char* qattn_last_error(void);
QATTN_API qattn_runtime_options qattn_default_options(void);

/* Fills *options (struct_size bytes, normally sizeof(qattn_options)) with the defaults and sets
 * struct_size. Accepted struct_size: at least the first version's size. */
QATTN_API qattn_status qattn_options_init(qattn_options* options, size_t struct_size);
/* Creates a runtime from versioned options (NULL: the defaults). */
QATTN_API qattn_status qattn_runtime_open(const qattn_options* options, qattn_runtime** out);
/* The first, unversioned form, kept unchanged for existing callers: the same as qattn_runtime_open with
 * these five fields and shipped_cache_path NULL ($QATTN_SHIPPED_CACHE still applies). New options are
 * only added to qattn_options. */
QATTN_API qattn_status qattn_runtime_create(const qattn_runtime_options* options, qattn_runtime** out);
QATTN_API void qattn_runtime_destroy(qattn_runtime* runtime);

/* The latest cache trouble as one line into text_out (at most text_len bytes with the terminator), ""
 * while the cache works as opened: a layer not opened as asked, or one that failed after opening
 * (locked by another process past its ~10 s budget, damaged, not writable), so that results are not
 * stored. The runtime itself keeps working without that layer. See docs/reliability.md. */
QATTN_API qattn_status qattn_cache_status(qattn_runtime* runtime, char* text_out, size_t text_len);

/* Compile-only (no GPU): renders and compiles `spec` (which must name arch=) with `tiling`
 * ("bm128_bn64_w4_s2", or NULL for the default), storing the cubin in the cache. Writes the kernel name
 * into name_out (if not NULL, at most name_len bytes including the terminator). */
QATTN_API qattn_status qattn_compile(qattn_runtime* runtime, const char* spec, const char* tiling,
                                     char* name_out, size_t name_len);

/* Tunes `spec` for the bucket of `shape` on the runtime's device and stores the winner; writes the
 * winning kernel name and its median time in microseconds. */
QATTN_API qattn_status qattn_tune(qattn_runtime* runtime, const char* spec, qattn_shape shape, char* name_out,
                                  size_t name_len, double* time_us);

/* O = attention(Q, K, V): quantizes internally when the spec is quantized. softmax_scale 0 means
 * 1/sqrt(d). lse: NULL or a float[b][hq][q_len] device buffer (natural-log log-sum-exp). */
QATTN_API qattn_status qattn_attention(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                       qattn_tensor q, qattn_tensor k, qattn_tensor v, qattn_tensor o,
                                       float softmax_scale, float* lse, void* stream);

/* Two-step form: quantize Q, K and V once into a workspace owned by the handle, then run the attention
 * kernel alone as often as wanted (kernel-only timing, or K/V reused). The inputs may be freed after
 * prepare's work has completed on `stream`. */
QATTN_API qattn_status qattn_prepare(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                     qattn_tensor q, qattn_tensor k, qattn_tensor v, void* stream,
                                     qattn_prepared** out);
QATTN_API qattn_status qattn_run_prepared(qattn_runtime* runtime, qattn_prepared* prepared, qattn_tensor o,
                                          float softmax_scale, float* lse, void* stream);
/* Name of the attention kernel a prepared call runs (valid while the handle lives). */
QATTN_API const char* qattn_prepared_kernel_name(const qattn_prepared* prepared);
QATTN_API void qattn_prepared_destroy(qattn_prepared* prepared);

#ifdef __cplusplus
}
#endif

#endif /* QATTN_QATTN_H_ */
