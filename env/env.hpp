// Every environment variable the library reads, read here and nowhere else: one place to see what the
// process environment can change, and one table documenting it (docs/environment.md). The lowest layer:
// the cache and the runtime both use it, and it depends on nothing of qattn.
//
// Paths are read at each call (tests and tools set them between calls); switches and experiment knobs
// are read once per process, at their first use.
#pragma once
#include <string>

namespace qattn::env {

// ---- paths ("" when unset or empty) --------------------------------------------------------------------
std::string cache_dir();        // QATTN_CACHE_DIR: the user cache's folder (qattn.db inside)
std::string xdg_cache_home();   // XDG_CACHE_HOME: the user cache's folder is $XDG_CACHE_HOME/qattn
std::string home();             // HOME: the user cache's folder is ~/.cache/qattn
std::string shipped_cache();    // QATTN_SHIPPED_CACHE: a read-only cache file under the user cache
std::string libcuda();          // QATTN_LIBCUDA: the CUDA driver library dlopen'ed (default libcuda.so.1)

// ---- switches ----------------------------------------------------------------------------------------
bool log();           // QATTN_LOG=1: cache warnings printed once each on stderr
bool sync_launch();   // QATTN_SYNC_LAUNCH set and not "0": synchronise after every launch (debugging)

// ---- experiment knobs: A/B measurements of kernel forms without rebuilding the caller ------------------
// Each one changes which kernel form or launch order runs, never the result's meaning; the defaults are
// the measured best (docs/environment.md). The runtime takes them into rt::ExperimentOptions.
bool fuse_q_off();              // QATTN_FUSE_Q=0: no fused-Q (_qf) prefill kernels
bool tma_off();                 // QATTN_TMA=0: no TMA (_tma) prefill kernels
bool concurrent_passes_off();   // QATTN_CONCURRENT_PASSES=0: quantization passes on the caller's stream only
int causal_band_heads();        // QATTN_CAUSAL_BAND=<n>: heads per band of the causal wgmma schedule; 0 unset
bool plan_graphs_off();         // QATTN_PLAN_GRAPHS=0: attention plans enqueue their launches one by one
bool quant_one_pass();          // QATTN_QUANT_ONE_PASS=1: one-pass quantization where a head fits

}  // namespace qattn::env
