// convert: dst = src in dst's dtype (same element count, contiguous). Float types convert with
// round-to-nearest-even (as torch's .to()); equal dtypes of any kind copy bytes.
#include <cstring>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  const char* op = "convert";
  check_host(op, "src", src);
  check_host(op, "dst", dst);
  MLXB_ARG(src.numel() == dst.numel(), op, "src and dst sizes differ: " + src.describe() + " vs " + dst.describe());
  const DType st = src.dtype(), dt = dst.dtype();
  if (st == dt) {
    std::memmove(dst.data(), src.data(), static_cast<size_t>(src.nbytes()));
    return;
  }
  MLXB_ARG(is_float(st) && is_float(dt), op, std::string("cannot convert ") + dtype_name(st) + " to " + dtype_name(dt));
  const char* s = static_cast<const char*>(src.data());
  char* d = static_cast<char*>(dst.data());
  parallel_for(src.numel(), 65536, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) store_f32(d, dt, i, load_f32(s, st, i));
  });
}

}  // namespace mlxb::cpu
