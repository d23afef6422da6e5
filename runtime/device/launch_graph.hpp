// A short sequence of launches issued again and again with new pointers, replayed as a CUDA graph.
//
// A plan's run enqueues the same few driver operations every time (a memset, the quantization passes,
// the attention kernel); only their pointers change. Each enqueue costs a few microseconds of host time,
// a graph launch about one, and updating one node's parameters a fraction of one (docs/perf.md, "From
// PyTorch"). So a run is recorded instead of enqueued (Recording: while one is alive on a
// thread, Kernel::launch and fill_bytes_async append to its recorder), and a ReplayGraph launches the
// record: built on first use, rebuilt when the sequence's shape (kinds, kernels, grids) changes, and
// otherwise updated only in the nodes whose parameters differ from its last launch.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/device/module.hpp"

namespace qattn::rt {

struct RecordedOp {
  enum class Kind { kernel, memset };
  Kind kind = Kind::kernel;
  CUfunction function = nullptr;       // kernel: in the context current at record time
  Dim3 grid, block;
  unsigned smem_bytes = 0;
  std::vector<unsigned char> params;   // kernel: its single parameter, bytewise
  CUdeviceptr dst = 0;                 // memset of `bytes` bytes to `value`
  unsigned char value = 0;
  size_t bytes = 0;

  // Whether a graph node made for `other` takes this op by a parameter update alone.
  bool same_shape(const RecordedOp& other) const;
  // Whether it already holds exactly this op.
  bool same_params(const RecordedOp& other) const;
};

class LaunchRecorder {
 public:
  void clear() { size_ = 0; }
  void kernel(CUfunction function, Dim3 grid, Dim3 block, unsigned smem_bytes, const void* params, size_t size);
  void memset(CUdeviceptr dst, unsigned char value, size_t bytes);
  size_t size() const { return size_; }
  const RecordedOp& operator[](size_t i) const { return ops_[i]; }
  void assign(const LaunchRecorder& other);   // a copy that reuses this recorder's buffers

  // Enqueues the recorded operations on `stream` one by one, as recording replaced them.
  void enqueue(CUstream stream, int device) const;

 private:
  RecordedOp& next();
  std::vector<RecordedOp> ops_;   // kept across clear(), so that their buffers are reused
  size_t size_ = 0;
};

// The calling thread's recorder while a Recording is alive on it, else null.
LaunchRecorder* active_recorder();

// Makes `recorder` (cleared) the calling thread's recorder for its lifetime.
class Recording {
 public:
  explicit Recording(LaunchRecorder& recorder);
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  LaunchRecorder* previous_;
};

// One executable graph of a recorded sequence. Launches of one graph are ordered after one another
// whatever their streams, so a caller running on several streams keeps one per stream.
class ReplayGraph {
 public:
  explicit ReplayGraph(int device) : device_(device) {}
  ~ReplayGraph();
  ReplayGraph(const ReplayGraph&) = delete;
  ReplayGraph& operator=(const ReplayGraph&) = delete;

  // Whether this driver has the graph entry points launch() needs.
  static bool available();
  // Launches `ops` on `stream` as this graph. False when a graph call failed (nothing was launched):
  // the caller enqueues the ops itself, and this graph is not used again.
  bool launch(const LaunchRecorder& ops, CUstream stream);
  bool broken() const { return broken_; }

 private:
  bool build(const LaunchRecorder& ops);
  bool update(const LaunchRecorder& ops);
  void release();

  int device_;
  CUcontext context_ = nullptr;   // where the graph was instantiated
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  std::vector<CUgraphNode> nodes_;
  LaunchRecorder held_;            // what each node holds now
  bool broken_ = false;
};

// A plan's runs as graph replays: one ReplayGraph per stream (for up to kMaxStreams streams, since
// launches of one graph are ordered after one another) and the record of the run being issued.
class PlanGraphs {
 public:
  static constexpr size_t kMaxStreams = 8;
  // enabled false: every run enqueues its launches directly.
  PlanGraphs(int device, bool enabled) : device_(device), enabled_(enabled && ReplayGraph::available()) {}
  bool enabled() const { return enabled_; }

  // Issues `enqueue` (launches through Kernel::launch and fill_bytes_async) on `stream`: recorded and
  // launched as this stream's graph; or directly inside the caller's own capture (graphs never nest),
  // past kMaxStreams streams, after a graph failed, or when disabled. One run is issued at a time.
  template <class Enqueue>
  void run(CUstream stream, Enqueue&& enqueue) {
    if (enabled_ && !capturing(stream)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (ReplayGraph* graph = graph_for(stream)) {
        {
          Recording recording(recorder_);
          enqueue();
        }
        if (!graph->launch(recorder_, stream)) recorder_.enqueue(stream, device_);
        return;
      }
    }
    enqueue();
  }

 private:
  bool capturing(CUstream stream) const;   // in this device's context (the caller may have none current)
  ReplayGraph* graph_for(CUstream stream);   // made on first use; null: none for it

  int device_;
  bool enabled_;
  std::mutex mutex_;
  LaunchRecorder recorder_;
  std::vector<std::pair<CUstream, std::unique_ptr<ReplayGraph>>> graphs_;
};

}  // namespace qattn::rt
