// CudaBackend: device discovery, the stream, copies, argument checks shared by the op files.
// Discovery never aborts: without a driver or a GPU cudaGetDeviceCount returns an error code,
// which makes cuda_backend_available() false and cuda_backend() throw kUnsupported.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "ops/backends.h"

namespace mlxb {
namespace cuda {

void throw_cuda(cudaError_t e, const char* what) {
  ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kInternal;
  fail(code, std::string("cuda: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what);
}

namespace {
struct DeviceState {
  bool ok = false;
  std::string why;
  cudaStream_t stream = nullptr;
  int sms = 1;
  int smem_optin = 48 * 1024;
  int* counters = nullptr;  // kSyncCounters zeroed ints (sync_counters)
  int major = 0;            // compute capability
};

DeviceState& state() {
  static DeviceState s;
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      s.why = std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")";
      cudaGetLastError();
      return;
    }
    if (n == 0) { s.why = "no CUDA device found"; return; }
    cudaDeviceProp prop{};
    if (cudaSetDevice(0) != cudaSuccess || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
      s.why = "CUDA device 0 could not be initialised";
      cudaGetLastError();
      return;
    }
    if (prop.major < 8) {
      s.why = std::string("CUDA device ") + prop.name + " has compute capability " + std::to_string(prop.major) + "." +
              std::to_string(prop.minor) + "; 8.0 or newer is needed";
      return;
    }
    if (cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) != cudaSuccess) {
      s.why = "could not create a CUDA stream";
      cudaGetLastError();
      return;
    }
    if (cudaMalloc(reinterpret_cast<void**>(&s.counters), kSyncCounters * sizeof(int)) != cudaSuccess ||
        cudaMemset(s.counters, 0, kSyncCounters * sizeof(int)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      s.why = "could not allocate the CUDA backend's synchronisation counters";
      cudaGetLastError();
      return;
    }
    s.sms = prop.multiProcessorCount;
    s.major = prop.major;
    s.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    s.ok = true;
  });
  return s;
}
}  // namespace

namespace {
thread_local cudaStream_t t_capture_stream = nullptr;
}
cudaStream_t main_stream() { return state().stream; }
cudaStream_t stream() { return t_capture_stream ? t_capture_stream : state().stream; }
void set_capture_stream(cudaStream_t s) { t_capture_stream = s; }
int sm_count() { return state().sms; }
int max_smem_optin() { return state().smem_optin; }
int compute_major() { return state().major; }
int* sync_counters() { return state().counters; }
bool programmatic_launch() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_CUDA_PDL");
    return !(v && std::strcmp(v, "0") == 0) && state().major >= 9;
  }();
  return on;
}
bool programmatic_ops(const char* kind) {
  static const char* list = std::getenv("MLXB_CUDA_PDL_OPS");  // unset: all; "0": none; else names, e.g. "norm,rope"
  if (!programmatic_launch()) return false;
  if (!list) return true;
  const size_t n = std::strlen(kind);
  for (const char* p = list; (p = std::strstr(p, kind)) != nullptr; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return true;
  return false;
}

void check_float(const Tensor& t, const char* op, const char* name) {
  DType d = t.dtype();
  if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
    fail(ErrorCode::kUnsupported, std::string("cuda ") + op + ": " + name + " has dtype " + dtype_name(d) +
                                      " (float32, bfloat16 or float16 expected)");
}

void check_device(const Tensor& t, const char* op, const char* name) {
  if (t.device() != Device::kCUDA)
    fail(ErrorCode::kInvalidArgument, std::string("cuda ") + op + ": " + name + " is on " + device_name(t.device()) +
                                          ", expected cuda (" + t.describe() + ")");
}

bool rows_dense(const Tensor& x) {
  return x.ndim() == 3 && x.stride(2) == 1 && x.stride(1) == x.dim(2) && x.stride(0) >= x.dim(1) * x.dim(2);
}

void check_contiguous(const Tensor& t, const char* op, const char* name) {
  if (!t.is_contiguous())
    fail(ErrorCode::kInvalidArgument, std::string("cuda ") + op + ": " + name + " must be contiguous (" + t.describe() + ")");
}

CudaBackend::CudaBackend() = default;

namespace {
// Small host-to-device copies (token ids, positions, cache slots: a few per layer and step) go
// through pinned staging slots so that they are truly asynchronous: the host copies into a
// slot, queues the DMA and returns without waiting for the stream. A slot is reused only after
// the event recorded behind its last copy has completed.
constexpr int kStageSlots = 64;
constexpr int64_t kStageBytes = 64 * 1024;

struct Staging {
  std::mutex mu;
  bool ready = false;
  char* host = nullptr;
  cudaEvent_t events[kStageSlots] = {};
  int next = 0;
};

Staging& staging() {
  static Staging* s = new Staging();
  return *s;
}

bool staged_upload(void* dst, const void* src, int64_t bytes) {
  if (bytes > kStageBytes) return false;
  Staging& s = staging();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.ready) {
    if (cudaMallocHost(reinterpret_cast<void**>(&s.host), kStageBytes * kStageSlots) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    for (auto& e : s.events) MLXB_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    s.ready = true;
  }
  int slot = s.next;
  s.next = (s.next + 1) % kStageSlots;
  MLXB_CUDA_OK(cudaEventSynchronize(s.events[slot]));
  char* buf = s.host + static_cast<int64_t>(slot) * kStageBytes;
  std::memcpy(buf, src, static_cast<size_t>(bytes));
  MLXB_CUDA_OK(cudaMemcpyAsync(dst, buf, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream()));
  MLXB_CUDA_OK(cudaEventRecord(s.events[slot], stream()));
  return true;
}

// Small device-to-host reads collected later (Backend::read_later): each ticket owns a pinned
// slot and an event recorded behind its copy. Where pinned memory cannot be had, the base
// class's synchronous form serves every ticket instead.
struct Reads {
  std::mutex mu;
  int state = 0;  // 0 not set up, 1 pinned slots, -1 the base form
  char* host = nullptr;
  cudaEvent_t events[Backend::kReadSlots] = {};
  int64_t size[Backend::kReadSlots] = {};
  int64_t next = 0;
};

Reads& reads() {
  static Reads* r = new Reads();
  return *r;
}
}  // namespace

int64_t CudaBackend::read_later(const void* src, int64_t bytes) {
  check_read_bytes(bytes);
  if (t_capture_stream) fail(ErrorCode::kInternal, "cuda: a host read was queued while a graph was being captured");
  Reads& r = reads();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.state == 0) {
      r.state = -1;
      if (cudaMallocHost(reinterpret_cast<void**>(&r.host), kReadSlots * kReadBytes) == cudaSuccess) {
        for (auto& e : r.events) MLXB_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        r.state = 1;
      } else {
        cudaGetLastError();
      }
    }
    if (r.state == 1) {
      const int64_t t = r.next;
      const int64_t slot = t % kReadSlots;
      MLXB_CUDA_OK(cudaMemcpyAsync(r.host + slot * kReadBytes, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream()));
      MLXB_CUDA_OK(cudaEventRecord(r.events[slot], stream()));
      r.size[slot] = bytes;
      ++r.next;
      return t;
    }
  }
  return Backend::read_later(src, bytes);
}

void CudaBackend::read_wait(int64_t ticket, void* dst) {
  Reads& r = reads();
  cudaEvent_t ev;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.state != 1) return Backend::read_wait(ticket, dst);
    ev = r.events[read_slot(ticket, r.next)];
  }
  MLXB_CUDA_OK(cudaEventSynchronize(ev));
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t slot = read_slot(ticket, r.next);  // still this ticket's (kReadSlots newer reads would have expired it)
  std::memcpy(dst, r.host + slot * kReadBytes, static_cast<size_t>(r.size[slot]));
}

void CudaBackend::copy(void* dst, Device dst_dev, const void* src, Device src_dev, int64_t bytes) {
  if (bytes <= 0) return;
  cudaMemcpyKind kind = dst_dev == Device::kCUDA ? (src_dev == Device::kCUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                                 : (src_dev == Device::kCUDA ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  if (t_capture_stream && kind != cudaMemcpyDeviceToDevice)
    fail(ErrorCode::kInternal, "cuda: a host copy was queued while a graph was being captured");
  if (kind == cudaMemcpyHostToDevice && staged_upload(dst, src, bytes)) return;
  MLXB_CUDA_OK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream()));
  // Host memory must be complete (D2H) or reusable (large H2D from pageable memory) on return.
  if (kind != cudaMemcpyDeviceToDevice) MLXB_CUDA_OK(cudaStreamSynchronize(stream()));
}

void CudaBackend::zero(void* p, int64_t bytes) {
  if (bytes > 0) MLXB_CUDA_OK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream()));
}

void CudaBackend::synchronize() { MLXB_CUDA_OK(cudaStreamSynchronize(stream())); }

}  // namespace cuda

bool cuda_backend_built() { return true; }
bool cuda_backend_available() { return cuda::state().ok; }

Backend& cuda_backend() {
  auto& s = cuda::state();
  if (!s.ok) fail(ErrorCode::kUnsupported, "cuda: " + s.why);
  static cuda::CudaBackend* b = new cuda::CudaBackend();
  return *b;
}

}  // namespace mlxb
