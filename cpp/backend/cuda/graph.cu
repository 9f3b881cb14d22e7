// Graph capture for the CUDA backend (ops.h: begin_capture / end_capture / abort_capture).
// The calling thread's ops go to a private capture stream (stream() returns it for that thread
// only, so other threads' work on the main stream is never recorded) and its allocations to an
// Arena owned by the resulting graph. The graph replays on the main stream.
#include <string>

#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

namespace {

struct CaptureState {
  cudaStream_t stream = nullptr;
  Arena* arena = nullptr;
};
thread_local CaptureState t_cap;

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, Arena* arena) : exec_(exec), arena_(arena) {}
  ~CudaGraph() override {
    // A replay may still run: the arena's memory and the executable graph outlive it.
    cudaStreamSynchronize(main_stream());
    cudaGraphExecDestroy(exec_);
    arena_destroy(arena_);
    cudaGetLastError();
  }
  void launch() override { MLXB_CUDA_OK(cudaGraphLaunch(exec_, main_stream())); }

 private:
  cudaGraphExec_t exec_;
  Arena* arena_;
};

void end_thread_capture() {
  set_capture_stream(nullptr);
  set_thread_arena(nullptr);
  if (t_cap.stream) cudaStreamDestroy(t_cap.stream);
  t_cap = CaptureState{};
}

}  // namespace

bool CudaBackend::begin_capture() {
  if (t_cap.stream) fail(ErrorCode::kInternal, "cuda: a graph capture is already in progress on this thread");
  Arena* arena = arena_create();  // takes its first chunk now, outside the capture
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    arena_destroy(arena);
    return false;
  }
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(s);
    arena_destroy(arena);
    return false;
  }
  t_cap.stream = s;
  t_cap.arena = arena;
  set_capture_stream(s);
  set_thread_arena(arena);
  return true;
}

std::unique_ptr<DeviceGraph> CudaBackend::end_capture() {
  if (!t_cap.stream) fail(ErrorCode::kInternal, "cuda: end_capture without begin_capture");
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(t_cap.stream, &graph);
  Arena* arena = t_cap.arena;
  end_thread_capture();
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    arena_destroy(arena);
    throw_cuda(e, "graph capture");
  }
  return std::make_unique<CudaGraph>(exec, arena);
}

void CudaBackend::abort_capture() {
  if (!t_cap.stream) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(t_cap.stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  Arena* arena = t_cap.arena;
  end_thread_capture();
  arena_destroy(arena);
}

}  // namespace mlxb::cuda
