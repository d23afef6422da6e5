// qattn_bench_decode: times Runtime::decode over a filled KV cache and prints one JSON line.
//
//   qattn_bench_decode --spec "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4"
//                      --shape b=8,hq=32,hkv=8,q=1,kv=131072 [--paged 16] [--splits N]
//                      [--iters 50] [--warmup 10] [--flush-mb 256] [--cache FILE] [--no-tune] [--seed S]
//
// The caches (contiguous with capacity = kv, or paged through a randomly permuted block table) are
// filled by Runtime::append_kv from fp16/bf16 tokens with a few strongly biased K channels (fp8e4m3:
// per-head scales from the tokens' range), every sequence holds kv tokens, and each timed decode launch
// is bracketed by its own pair of CUDA events. A flashq cache is filled by Runtime::flashq_prefill with
// kv - q tokens (the bit widths its choice, half the heads at 2 bits) and one flashq_append of q tokens.
// Exit status: 0 done, 1 failure (driver, runtime, memory), 2 bad arguments, 3 no GPU.
//
// The device helpers used here (qattn::rt, runtime/*.hpp) are exported by libqattn.so; the driver is
// the one the library dlopens, so this program never links libcuda itself.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qattn/decode.hpp"
#include "qattn/decode/kv_layout.h"
#include "qattn/error.hpp"
#include "qattn/problem.hpp"
#include "qattn/runtime.hpp"
#include "qattn/spec.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/tuning/host_data.hpp"

namespace {

using qattn::rt::DeviceBuffer;

constexpr int kDevice = 0;
// Source tokens for the fill are drawn from a device pool of this many rows (plus kPoolSlack rows so
// that each chunk can start at a different row): large caches are filled chunk by chunk from it
// without ever holding the whole fp16 source (17 GB per tensor at b=64, kv=128k) anywhere.
constexpr long long kMaxChunkRows = 1LL << 18;
constexpr long long kPoolSlack = 8192;
// Upper bound on tokens per append call, to stay far below any grid-dimension limit of the append kernel.
constexpr int kMaxChunkTokens = 4096;

struct Options {
  std::string spec_text, shape_text, cache_path, tiling_text;   // tiling: empty = the runtime's choice
  int page_size = 0;   // 0: contiguous cache
  int splits = 0;      // 0: the runtime's choice
  int iters = 50, warmup = 10;
  int flush_mb = 256;  // L2 flush before every timed launch; 0: none
  bool tune = true;
  unsigned long long seed = 1234;
};

struct BadArgs {
  std::string message;
};

const char* kUsage =
    "usage: qattn_bench_decode --spec \"decode qk=... pv=... out=bf16 d=128 gqa=4 [paged]\" "
    "--shape b=8,hq=32,hkv=8,q=1,kv=131072 [--paged PAGE_SIZE] [--splits N] [--tiling bm16_bn32_w4_s4] [--iters 50] "
    "[--warmup 10] [--flush-mb 256] [--cache FILE] [--no-tune] [--seed S]";

int to_int(const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < lo || value > hi)
    throw BadArgs{flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                  text + "'"};
  return static_cast<int>(value);
}

// Accepts "--flag value" and "--flag=value".
Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool has_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw BadArgs{flag + " needs a value"};
      return argv[++i];
    };
    if (flag == "--spec") o.spec_text = next();
    else if (flag == "--shape") o.shape_text = next();
    else if (flag == "--paged") o.page_size = to_int(flag, next(), 4, 1 << 20);
    else if (flag == "--splits") o.splits = to_int(flag, next(), 0, 1 << 16);
    else if (flag == "--tiling") o.tiling_text = next();
    else if (flag == "--iters") o.iters = to_int(flag, next(), 1, 100000);
    else if (flag == "--warmup") o.warmup = to_int(flag, next(), 0, 100000);
    else if (flag == "--flush-mb") o.flush_mb = to_int(flag, next(), 0, 1 << 16);
    else if (flag == "--cache") o.cache_path = next();
    else if (flag == "--seed") o.seed = static_cast<unsigned long long>(to_int(flag, next(), 0, 1 << 30));
    else if (flag == "--no-tune" && !has_value) o.tune = false;
    else throw BadArgs{"unknown argument '" + std::string(argv[i]) + "'"};
  }
  if (o.spec_text.empty() || o.shape_text.empty()) throw BadArgs{"--spec and --shape are required"};
  if (o.page_size % 4 != 0) throw BadArgs{"--paged wants a multiple of 4 (the cache copies 4 rows at a time)"};
  return o;
}

// The spec and the shape, checked for what this benchmark needs (the runtime checks the rest).
void check_problem(const qattn::Spec& spec, const qattn::Problem& p, const Options& o) {
  if (spec.phase != qattn::Phase::decode) throw BadArgs{"--spec must be a decode spec (starts with 'decode')"};
  if (spec.out != qattn::Fmt::fp16 && spec.out != qattn::Fmt::bf16)
    throw BadArgs{"the spec's out= must be fp16 or bf16"};
  if (spec.paged != (o.page_size > 0))
    throw BadArgs{spec.paged ? "the spec says 'paged': give --paged PAGE_SIZE"
                             : "--paged needs the 'paged' token in the spec"};
  if (p.q_len < 1 || p.q_len > 16) throw BadArgs{"decode wants q (new tokens per sequence) in 1..16; give q= in --shape"};
  if (p.kv_len < p.q_len) throw BadArgs{"kv must be >= q"};
  if (o.page_size == 0 && p.kv_len % 4 != 0)
    throw BadArgs{"kv must be a multiple of 4 for a contiguous cache (16-byte aligned head strides)"};
}

// Device memory of one run; sizes computed up front so a shape that does not fit fails before it allocates.
struct Plan {
  int row_bytes = 0;
  int pages_per_seq = 0, total_pages = 0;   // paged only
  long long cache_bytes = 0;                // one cache (K or V)
  int chunk_tokens = 0;                     // tokens per append call
  long long pool_rows = 0;                  // source rows in each (K, V) device pool
  long long qo_bytes = 0;                   // q (and o) bytes
  long long total_bytes = 0;
};

Plan make_plan(const qattn::Spec& spec, const qattn::Problem& p, const Options& o) {
  Plan plan;
  plan.row_bytes = qattn::kv_row_bytes(spec);
  if (o.page_size > 0) {
    plan.pages_per_seq = (p.kv_len + o.page_size - 1) / o.page_size;
    const long long pages = static_cast<long long>(p.batch) * plan.pages_per_seq;
    if (pages > (1LL << 30)) throw BadArgs{"too many pages"};
    plan.total_pages = static_cast<int>(pages);
    // A paged cache is laid out like a contiguous one with one "sequence" per page of page_size tokens.
    plan.cache_bytes = qattn::kv_cache_bytes(spec, plan.total_pages, p.heads_kv, o.page_size);
  } else {
    plan.cache_bytes = qattn::kv_cache_bytes(spec, p.batch, p.heads_kv, p.kv_len);
  }
  const long long rows_per_token = static_cast<long long>(p.batch) * p.heads_kv;
  const long long by_pool = std::max(1LL, kMaxChunkRows / rows_per_token);
  plan.chunk_tokens = static_cast<int>(std::min<long long>({p.kv_len, kMaxChunkTokens, by_pool}));
  plan.pool_rows = rows_per_token * plan.chunk_tokens + kPoolSlack;
  plan.qo_bytes = static_cast<long long>(p.batch) * p.heads_q * p.q_len * spec.head_dim * 2;
  plan.total_bytes = 2 * plan.cache_bytes + 2 * plan.pool_rows * spec.head_dim * 2 + 2 * plan.qo_bytes +
                     (static_cast<long long>(o.flush_mb) << 20) + 4LL * plan.total_pages + (64LL << 20);
  return plan;
}

std::string gib(long long bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1LL << 30));
  return text;
}

// Random activations converted to the spec's 16-bit element type.
std::vector<uint16_t> random_tokens(std::mt19937_64& rng, long long rows, int d, int biased, int scaled,
                                    qattn::Fmt fmt) {
  const std::vector<float> x = qattn::rt::random_activations(rng, rows, d, biased, scaled);
  std::vector<uint16_t> bits(x.size());
  std::transform(x.begin(), x.end(), bits.begin(), [fmt](float f) { return qattn::rt::to_bits(fmt, f); });
  return bits;
}

// The device side of one run.
struct Buffers {
  DeviceBuffer k_cache, v_cache, q, o, kv_lens, block_table, flush, k_scale, v_scale;
  // flashq: buffers, head table, lengths, universal scales
  DeviceBuffer k_buffer, v_buffer, fq_heads, compressed, buffered;
};

// Block table of a paged cache: every page id used once, in random order, so that neighbouring
// tokens of a sequence are not neighbours in memory (as in a real paged cache after some churn).
std::vector<int> random_block_table(int total_pages, std::mt19937_64& rng) {
  std::vector<int> table(static_cast<size_t>(total_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  return table;
}

qattn::KvCacheView cache_view(const Buffers& buf, const qattn::Problem& p, const Plan& plan, const Options& o) {
  qattn::KvCacheView view;
  view.k = buf.k_cache.as<void>();
  view.v = buf.v_cache.as<void>();
  if (o.page_size > 0) {
    view.page_size = o.page_size;
    view.block_table = buf.block_table.as<const int>();
    view.table_stride = plan.pages_per_seq;
  } else {
    view.capacity = p.kv_len;
  }
  return view;
}

// Fills both caches with kv tokens per sequence, chunk by chunk through append_kv. Each chunk's source
// is a window of a random device pool starting at a different row, so chunks differ without
// generating (or uploading) the whole source.
// fp8e4m3: one scale for every head, max|x| / 448 of the source tokens.
std::vector<float> fp8_scales(const std::vector<uint16_t>& bits, qattn::Fmt fmt, int heads_kv) {
  float amax = 0.f;
  for (uint16_t b : bits) amax = std::max(amax, std::fabs(qattn::rt::from_bits(fmt, b)));
  return std::vector<float>(static_cast<size_t>(heads_kv), amax > 0.f ? amax / 448.f : 1.f);
}

void fill_caches(qattn::Runtime& runtime, const qattn::Spec& spec, const qattn::Problem& p, const Plan& plan,
                 qattn::KvCacheView& view, Buffers& buf, CUstream stream, std::mt19937_64& rng) {
  const int d = spec.head_dim;
  // K gets 4 channels offset by 5..20 (the outliers that make K quantization hard); V is plain N(0,1).
  const std::vector<uint16_t> k_host = random_tokens(rng, plan.pool_rows, d, 4, 0, spec.out);
  const std::vector<uint16_t> v_host = random_tokens(rng, plan.pool_rows, d, 0, 0, spec.out);
  if (spec.qk.fmt == qattn::Fmt::fp8e4m3) {
    buf.k_scale = DeviceBuffer::from(fp8_scales(k_host, spec.out, p.heads_kv), kDevice);
    buf.v_scale = DeviceBuffer::from(fp8_scales(v_host, spec.out, p.heads_kv), kDevice);
    view.k_head_scale = buf.k_scale.as<const float>();
    view.v_head_scale = buf.v_scale.as<const float>();
  }
  const DeviceBuffer k_pool = DeviceBuffer::from(k_host, kDevice);
  const DeviceBuffer v_pool = DeviceBuffer::from(v_host, kDevice);
  const int chunks = (p.kv_len + plan.chunk_tokens - 1) / plan.chunk_tokens;
  // All chunks' start offsets uploaded at once: the appends are asynchronous and must not see a
  // buffer rewritten under them.
  std::vector<int> starts(static_cast<size_t>(chunks) * p.batch);
  for (int c = 0; c < chunks; ++c)
    std::fill_n(starts.begin() + static_cast<long long>(c) * p.batch, p.batch, c * plan.chunk_tokens);
  const DeviceBuffer start_buf = DeviceBuffer::from(starts, kDevice);
  const long long row_elems = d;
  for (int c = 0; c < chunks; ++c) {
    qattn::AppendKvCall call;
    call.spec = spec;
    call.batch = p.batch;
    call.heads_kv = p.heads_kv;
    call.n_new = std::min(plan.chunk_tokens, p.kv_len - c * plan.chunk_tokens);
    const long long first_row = (static_cast<long long>(c) * 7919) % kPoolSlack;   // 256-byte aligned
    call.k = k_pool.as<const uint16_t>() + first_row * row_elems;
    call.v = v_pool.as<const uint16_t>() + first_row * row_elems;
    call.cache = view;
    call.start = start_buf.as<const int>() + static_cast<long long>(c) * p.batch;
    runtime.append_kv(call, stream);
  }
  // The pools and starts are freed when this returns: wait for the appends that read them.
  QATTN_CU(cuStreamSynchronize, stream);
}

// flashq: kv - q prefill tokens per sequence (one [n, d] source shared by every sequence and head,
// through zero strides), then one decode step's append of q tokens. Returns the bytes a decode reads:
// every block of every head at its bit width, and the buffer rows.
long long fill_flashq(qattn::Runtime& runtime, const qattn::Spec& spec, const qattn::Problem& p, const Options& o,
                      Buffers& buf, qattn::FlashQCacheView& view, CUstream stream, std::mt19937_64& rng) {
  const int d = spec.head_dim, n = p.kv_len - p.q_len;
  const int max_blocks = p.kv_len / qattn::kv::kFlashQBlock + 2;
  const long long pages = static_cast<long long>(p.batch) * max_blocks;
  const long long page_bytes = qattn::flashq_max_page_bytes(d, p.heads_kv);
  buf.k_cache = DeviceBuffer(static_cast<size_t>(pages * page_bytes), kDevice);
  buf.v_cache = DeviceBuffer(static_cast<size_t>(pages * page_bytes), kDevice);
  const long long buffer_bytes = qattn::flashq_buffer_bytes(d, p.batch, p.heads_kv);
  buf.k_buffer = DeviceBuffer(static_cast<size_t>(buffer_bytes), kDevice);
  buf.v_buffer = DeviceBuffer(static_cast<size_t>(buffer_bytes), kDevice);
  buf.fq_heads = DeviceBuffer(static_cast<size_t>(4 * p.heads_kv) * sizeof(int), kDevice);
  buf.compressed = DeviceBuffer::from(std::vector<int>(static_cast<size_t>(p.batch), 0), kDevice);
  buf.buffered = DeviceBuffer::from(std::vector<int>(static_cast<size_t>(p.batch), 0), kDevice);
  buf.k_scale = DeviceBuffer(static_cast<size_t>(p.heads_kv) * sizeof(float), kDevice);
  buf.v_scale = DeviceBuffer(static_cast<size_t>(p.heads_kv) * sizeof(float), kDevice);
  if (o.page_size > 0) buf.block_table = DeviceBuffer::from(random_block_table(static_cast<int>(pages), rng), kDevice);
  view.k_blocks = buf.k_cache.as<void>();
  view.v_blocks = buf.v_cache.as<void>();
  view.k_page_stride = view.v_page_stride = page_bytes;
  if (o.page_size > 0) {
    view.block_table = buf.block_table.as<const int>();
    view.table_stride = max_blocks;
  } else {
    view.max_blocks = max_blocks;
  }
  view.heads = buf.fq_heads.as<int>();
  view.k_buffer = buf.k_buffer.as<void>();
  view.v_buffer = buf.v_buffer.as<void>();
  view.compressed_lens = buf.compressed.as<int>();
  view.buffer_lens = buf.buffered.as<int>();
  view.k_scale8 = buf.k_scale.as<float>();
  view.v_scale8 = buf.v_scale.as<float>();

  const DeviceBuffer k_src = DeviceBuffer::from(random_tokens(rng, std::max(n, p.q_len), d, 4, 0, spec.out), kDevice);
  const DeviceBuffer v_src = DeviceBuffer::from(random_tokens(rng, std::max(n, p.q_len), d, 0, 0, spec.out), kDevice);
  qattn::FlashQPrefillInfo info;
  if (n > 0) {
    qattn::FlashQPrefillCall pre;
    pre.spec = spec;
    pre.batch = p.batch;
    pre.heads_kv = p.heads_kv;
    pre.n = n;
    pre.k = k_src.as<const void>();
    pre.v = v_src.as<const void>();
    pre.sb = 0, pre.sh = 0, pre.ss = d;   // every sequence and head reads the same n x d source
    pre.cache = view;
    info = runtime.flashq_prefill(pre, stream);
    view.bits = info.bits;
  }
  qattn::FlashQAppendCall app;
  app.spec = spec;
  app.batch = p.batch;
  app.heads_kv = p.heads_kv;
  app.n_new = p.q_len;
  app.k = k_src.as<const void>();
  app.v = v_src.as<const void>();
  app.sb = 0, app.sh = 0, app.ss = d;
  app.cache = view;
  runtime.flashq_append(app, stream);
  QATTN_CU(cuStreamSynchronize, stream);
  const int blocks = n / qattn::kv::kFlashQBlock;   // + at most one flushed by the append: ignored (small)
  const long long block_bytes = qattn::flashq_layout(d, view.bits.k_bits).page_bytes + qattn::flashq_layout(d, view.bits.v_bits).page_bytes;
  const int buffered = p.kv_len - blocks * qattn::kv::kFlashQBlock;
  return static_cast<long long>(p.batch) * (blocks * block_bytes + 2LL * buffered * p.heads_kv * qattn::flashq_buffer_row_bytes(d));
}

long long count_non_finite(const DeviceBuffer& o, qattn::Fmt fmt) {
  const std::vector<uint16_t> bits = o.to_vector<uint16_t>();
  return std::count_if(bits.begin(), bits.end(),
                       [fmt](uint16_t b) { return !std::isfinite(qattn::rt::from_bits(fmt, b)); });
}

// Runs one decode on an output poisoned with NaN (0xFFFF is NaN in fp16 and bf16): every output
// element the kernels fail to write, or compute as Inf/NaN, is counted.
long long poisoned_run(qattn::Runtime& runtime, const qattn::DecodeCall& call, const Buffers& buf,
                       const qattn::Spec& spec, CUstream stream) {
  qattn::rt::fill_bytes_async(buf.o.ptr(), 0xFF, buf.o.size(), stream, kDevice);
  runtime.decode(call, stream);
  QATTN_CU(cuStreamSynchronize, stream);
  return count_non_finite(buf.o, spec.out);
}

double percentile(std::vector<double> sorted_or_not, double fraction) {
  std::sort(sorted_or_not.begin(), sorted_or_not.end());
  const double pos = fraction * static_cast<double>(sorted_or_not.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted_or_not.size() - 1);
  return sorted_or_not[lo] + (pos - static_cast<double>(lo)) * (sorted_or_not[hi] - sorted_or_not[lo]);
}

struct Timing {
  std::vector<double> us;        // one sample per timed launch
  double enqueue_us_per_iter = 0;
};

// Each launch is timed alone between two events. Before each one an L2 flush (a memset larger than the
// 50 MB L2) evicts the previous launch's cache lines, as the other layers of a real decode step would,
// and keeps the GPU busy while the host enqueues the next launch, so host overhead stays out of the events.
Timing time_launches(qattn::Runtime& runtime, const qattn::DecodeCall& call, const Buffers& buf, int iters,
                     CUstream stream) {
  std::vector<qattn::rt::Event> start, stop;
  for (int i = 0; i < iters; ++i) {
    start.emplace_back(kDevice);
    stop.emplace_back(kDevice);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (buf.flush.size() > 0) qattn::rt::fill_words_async(buf.flush.ptr(), 0u, buf.flush.size() / 4, stream, kDevice);
    start[i].record(stream);
    runtime.decode(call, stream);
    stop[i].record(stream);
  }
  const auto t1 = std::chrono::steady_clock::now();
  stop.back().synchronize();
  Timing t;
  t.enqueue_us_per_iter = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
  for (int i = 0; i < iters; ++i) t.us.push_back(1000.0 * stop[i].elapsed_ms_since(start[i]));
  return t;
}

int run(const Options& o) {
  const qattn::Spec spec = qattn::parse_spec(o.spec_text);
  const qattn::Problem problem = qattn::parse_problem(o.shape_text);
  check_problem(spec, problem, o);
  const Plan plan = make_plan(spec, problem, o);

  std::string why;
  if (!qattn::rt::driver_available(&why)) throw qattn::Error(qattn::ErrorKind::no_gpu, "no CUDA driver: " + why);
  if (qattn::rt::device_count() == 0) throw qattn::Error(qattn::ErrorKind::no_gpu, "no CUDA device");
  // The device's primary context, current on this thread for the whole run: every buffer, stream and
  // event below and the runtime's own launches then share one context.
  qattn::rt::ContextGuard context(kDevice);
  const qattn::rt::DeviceInfo device = qattn::rt::query_device(kDevice);
  const qattn::rt::MemInfo mem = qattn::rt::mem_info(kDevice);
  if (static_cast<size_t>(plan.total_bytes) > mem.free_bytes)
    throw std::runtime_error("shape needs about " + gib(plan.total_bytes) + " of device memory (two caches of " +
                             gib(plan.cache_bytes) + "); " + gib(static_cast<long long>(mem.free_bytes)) + " free");

  qattn::RuntimeOptions options;
  options.cache_path = o.cache_path;
  options.tune = o.tune;
  options.device = kDevice;
  qattn::Runtime runtime(options);
  qattn::rt::Stream stream(kDevice);
  std::mt19937_64 rng(o.seed);

  Buffers buf;
  const bool flashq = spec.qk.fmt == qattn::Fmt::flashq;
  if (!flashq) {
    buf.k_cache = DeviceBuffer(static_cast<size_t>(plan.cache_bytes), kDevice);
    buf.v_cache = DeviceBuffer(static_cast<size_t>(plan.cache_bytes), kDevice);
    // Zeroed first: rows past kv (none here) or padding never hold garbage that could read as NaN.
    buf.k_cache.fill(0);
    buf.v_cache.fill(0);
  }
  buf.q = DeviceBuffer::from(random_tokens(rng, plan.qo_bytes / (2 * spec.head_dim), spec.head_dim, 0, 2, spec.out),
                             kDevice);
  buf.o = DeviceBuffer(static_cast<size_t>(plan.qo_bytes), kDevice);
  buf.kv_lens = DeviceBuffer::from(std::vector<int>(static_cast<size_t>(problem.batch), problem.kv_len), kDevice);
  if (o.page_size > 0 && !flashq) buf.block_table = DeviceBuffer::from(random_block_table(plan.total_pages, rng), kDevice);
  buf.flush = DeviceBuffer(static_cast<size_t>(o.flush_mb) << 20, kDevice);
  qattn::KvCacheView view = cache_view(buf, problem, plan, o);
  qattn::FlashQCacheView fq_view;

  const auto fill_start = std::chrono::steady_clock::now();
  long long fq_bytes = 0;
  if (flashq) fq_bytes = fill_flashq(runtime, spec, problem, o, buf, fq_view, stream.get(), rng);
  else fill_caches(runtime, spec, problem, plan, view, buf, stream.get(), rng);
  const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();

  qattn::DecodeCall call;
  call.spec = spec;
  call.problem = problem;
  call.q = buf.q.as<void>();
  call.o = buf.o.as<void>();
  call.cache = view;
  call.kv_lens = buf.kv_lens.as<const int>();
  call.flashq = fq_view;
  call.splits = o.splits;
  if (!o.tiling_text.empty()) call.tiling = qattn::parse_tiling(o.tiling_text);
  const int splits = runtime.decode_splits(call);

  // The first call may compile or tune: timed apart, never among the samples.
  const auto first_start = std::chrono::steady_clock::now();
  long long non_finite = poisoned_run(runtime, call, buf, spec, stream.get());
  const double first_call_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
  for (int i = 0; i < o.warmup; ++i) runtime.decode(call, stream.get());
  const Timing timing = time_launches(runtime, call, buf, o.iters, stream.get());
  // Checked again after the timed runs (a race or a stale workspace shows up only in later launches).
  non_finite = std::max(non_finite, poisoned_run(runtime, call, buf, spec, stream.get()));

  // Bytes a decode must move: every cached K and V row of every sequence once, plus q and o.
  const long long cache_read = flashq ? fq_bytes : 2LL * problem.batch * problem.heads_kv * problem.kv_len * plan.row_bytes;
  const long long bytes_read = cache_read + 2 * plan.qo_bytes;
  const double median_us = percentile(timing.us, 0.5);

  nlohmann::ordered_json out;
  out["spec"] = qattn::to_string(spec);
  out["shape"] = qattn::to_string(problem);
  out["paged"] = o.page_size;
  out["splits"] = splits;
  out["tiling"] = o.tiling_text.empty() ? "default" : o.tiling_text;
  out["median_us"] = median_us;
  out["p10_us"] = percentile(timing.us, 0.1);
  out["p90_us"] = percentile(timing.us, 0.9);
  out["min_us"] = *std::min_element(timing.us.begin(), timing.us.end());
  out["bytes_read"] = bytes_read;
  out["gbps"] = static_cast<double>(bytes_read) / (median_us * 1e-6) / 1e9;
  out["non_finite"] = non_finite;
  out["kv_row_bytes"] = flashq ? 0 : plan.row_bytes;
  if (flashq) {
    out["k_bits"] = fq_view.bits.k_bits;
    out["v_bits"] = fq_view.bits.v_bits;
  }
  out["cache_alloc_bytes"] = 2 * plan.cache_bytes;   // K + V as allocated (paged: all pages)
  out["device"] = device.name;
  out["iters"] = o.iters;
  out["warmup"] = o.warmup;
  out["flush_mb"] = o.flush_mb;
  out["first_call_s"] = first_call_s;
  out["fill_s"] = fill_s;
  out["enqueue_us_per_iter"] = timing.enqueue_us_per_iter;
  out["times_us"] = timing.us;
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return non_finite == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  try {
    return run(parse_args(argc, argv));
  } catch (const BadArgs& e) {
    std::fprintf(stderr, "qattn_bench_decode: %s (see --help)\n", e.message.c_str());
    return 2;
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn_bench_decode: %s\n", e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_bench_decode: %s\n", e.what());
    return 1;
  }
}
