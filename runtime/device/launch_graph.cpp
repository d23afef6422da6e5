#include "runtime/device/launch_graph.hpp"

#include <cstring>
#include <exception>

#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"

namespace qattn::rt {

namespace {

thread_local LaunchRecorder* t_recorder = nullptr;

CUDA_KERNEL_NODE_PARAMS kernel_node(const RecordedOp& op, void** args) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = op.function;
  p.gridDimX = op.grid.x, p.gridDimY = op.grid.y, p.gridDimZ = op.grid.z;
  p.blockDimX = op.block.x, p.blockDimY = op.block.y, p.blockDimZ = op.block.z;
  p.sharedMemBytes = op.smem_bytes;
  args[0] = const_cast<unsigned char*>(op.params.data());
  p.kernelParams = op.params.empty() ? nullptr : args;
  return p;
}

CUDA_MEMSET_NODE_PARAMS memset_node(const RecordedOp& op) {
  CUDA_MEMSET_NODE_PARAMS p{};
  p.dst = op.dst;
  p.value = op.value;
  p.elementSize = 1;
  p.width = op.bytes;
  p.height = 1;
  return p;
}

}  // namespace

bool RecordedOp::same_shape(const RecordedOp& o) const {
  if (kind != o.kind) return false;
  if (kind == Kind::memset) return bytes == o.bytes;   // width is fixed at instantiation
  return function == o.function && grid.x == o.grid.x && grid.y == o.grid.y && grid.z == o.grid.z &&
         block.x == o.block.x && block.y == o.block.y && block.z == o.block.z && smem_bytes == o.smem_bytes &&
         params.size() == o.params.size();
}

bool RecordedOp::same_params(const RecordedOp& o) const {
  if (!same_shape(o)) return false;
  if (kind == Kind::memset) return dst == o.dst && value == o.value;
  return std::memcmp(params.data(), o.params.data(), params.size()) == 0;
}

RecordedOp& LaunchRecorder::next() {
  if (size_ == ops_.size()) ops_.emplace_back();
  return ops_[size_++];
}

void LaunchRecorder::kernel(CUfunction function, Dim3 grid, Dim3 block, unsigned smem_bytes, const void* params,
                            size_t size) {
  RecordedOp& op = next();
  op.kind = RecordedOp::Kind::kernel;
  op.function = function;
  op.grid = grid, op.block = block, op.smem_bytes = smem_bytes;
  const auto* bytes = static_cast<const unsigned char*>(params);
  op.params.assign(bytes, bytes + (params ? size : 0));
}

void LaunchRecorder::memset(CUdeviceptr dst, unsigned char value, size_t bytes) {
  RecordedOp& op = next();
  op.kind = RecordedOp::Kind::memset;
  op.dst = dst, op.value = value, op.bytes = bytes;
}

void LaunchRecorder::assign(const LaunchRecorder& other) {
  clear();
  for (size_t i = 0; i < other.size(); ++i) {
    RecordedOp& op = next();
    const RecordedOp& from = other[i];
    op.kind = from.kind;
    op.function = from.function;
    op.grid = from.grid, op.block = from.block, op.smem_bytes = from.smem_bytes;
    op.params.assign(from.params.begin(), from.params.end());
    op.dst = from.dst, op.value = from.value, op.bytes = from.bytes;
  }
}

void LaunchRecorder::enqueue(CUstream stream, int device) const {
  ContextGuard guard(device);
  const DriverApi& api = driver();
  for (size_t i = 0; i < size_; ++i) {
    const RecordedOp& op = ops_[i];
    if (op.kind == RecordedOp::Kind::memset) {
      check(api.cuMemsetD8Async(op.dst, op.value, op.bytes, stream), "cuMemsetD8Async");
      continue;
    }
    void* args[] = {const_cast<unsigned char*>(op.params.data())};
    check(api.cuLaunchKernel(op.function, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y, op.block.z,
                             op.smem_bytes, stream, op.params.empty() ? nullptr : args, nullptr),
          "cuLaunchKernel");
  }
}

LaunchRecorder* active_recorder() { return t_recorder; }

Recording::Recording(LaunchRecorder& recorder) : previous_(t_recorder) {
  recorder.clear();
  t_recorder = &recorder;
}

Recording::~Recording() { t_recorder = previous_; }

bool ReplayGraph::available() {
  if (!driver_available()) return false;
  const DriverApi& api = driver();
  return api.cuGraphCreate && api.cuGraphAddKernelNode && api.cuGraphAddMemsetNode && api.cuGraphInstantiate &&
         api.cuGraphLaunch && api.cuGraphExecKernelNodeSetParams && api.cuGraphExecMemsetNodeSetParams &&
         api.cuGraphExecDestroy && api.cuGraphDestroy;
}

ReplayGraph::~ReplayGraph() {
  try {
    release();
  } catch (const std::exception&) {   // a driver already shut down (process exit): nothing left to free
  }
}

void ReplayGraph::release() {
  if (!graph_ && !exec_) return;
  ContextGuard guard(device_);
  const DriverApi& api = driver();
  if (exec_) api.cuGraphExecDestroy(exec_);
  if (graph_) api.cuGraphDestroy(graph_);
  exec_ = nullptr, graph_ = nullptr;
  nodes_.clear();
  held_.clear();
}

bool ReplayGraph::build(const LaunchRecorder& ops) {
  release();
  const DriverApi& api = driver();
  ContextGuard guard(device_);
  context_ = guard.context();
  if (api.cuGraphCreate(&graph_, 0) != CUDA_SUCCESS) return false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const RecordedOp& op = ops[i];
    CUgraphNode node = nullptr;
    const CUgraphNode* after = nodes_.empty() ? nullptr : &nodes_.back();
    const size_t n_after = nodes_.empty() ? 0 : 1;
    CUresult r;
    if (op.kind == RecordedOp::Kind::memset) {
      const CUDA_MEMSET_NODE_PARAMS p = memset_node(op);
      r = api.cuGraphAddMemsetNode(&node, graph_, after, n_after, &p, context_);
    } else {
      void* args[1];
      const CUDA_KERNEL_NODE_PARAMS p = kernel_node(op, args);
      r = api.cuGraphAddKernelNode(&node, graph_, after, n_after, &p);
    }
    if (r != CUDA_SUCCESS) return false;
    nodes_.push_back(node);
  }
  if (api.cuGraphInstantiate(&exec_, graph_, 0) != CUDA_SUCCESS) {
    exec_ = nullptr;
    return false;
  }
  held_.assign(ops);
  return true;
}

bool ReplayGraph::update(const LaunchRecorder& ops) {
  const DriverApi& api = driver();
  for (size_t i = 0; i < ops.size(); ++i) {
    const RecordedOp& op = ops[i];
    if (op.same_params(held_[i])) continue;
    CUresult r;
    if (op.kind == RecordedOp::Kind::memset) {
      const CUDA_MEMSET_NODE_PARAMS p = memset_node(op);
      r = api.cuGraphExecMemsetNodeSetParams(exec_, nodes_[i], &p, context_);
    } else {
      void* args[1];
      const CUDA_KERNEL_NODE_PARAMS p = kernel_node(op, args);
      r = api.cuGraphExecKernelNodeSetParams(exec_, nodes_[i], &p);
    }
    if (r != CUDA_SUCCESS) return false;
  }
  held_.assign(ops);
  return true;
}

bool ReplayGraph::launch(const LaunchRecorder& ops, CUstream stream) {
  if (broken_ || ops.size() == 0) return false;
  ContextGuard guard(device_);
  bool fits = exec_ && guard.context() == context_ && held_.size() == ops.size();
  for (size_t i = 0; fits && i < ops.size(); ++i) fits = ops[i].same_shape(held_[i]);
  const bool ready = fits ? update(ops) : build(ops);
  if (!ready || driver().cuGraphLaunch(exec_, stream) != CUDA_SUCCESS) {
    broken_ = true;
    release();
    return false;
  }
  return true;
}

bool PlanGraphs::capturing(CUstream stream) const {
  const ContextGuard guard(device_);
  return stream_capturing(stream);
}

ReplayGraph* PlanGraphs::graph_for(CUstream stream) {
  for (auto& [s, g] : graphs_)
    if (s == stream) return g->broken() ? nullptr : g.get();
  if (graphs_.size() >= kMaxStreams) return nullptr;
  graphs_.emplace_back(stream, std::make_unique<ReplayGraph>(device_));
  return graphs_.back().second.get();
}

}  // namespace qattn::rt
