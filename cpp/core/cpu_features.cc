// CPUID / XGETBV probing, done once.
#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace mlxb {

static CpuFeatures probe() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = (c >> 27) & 1;
  bool fma = (c >> 12) & 1;
  bool f16c = (c >> 29) & 1;
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  bool ymm = (xcr0 & 0x6) == 0x6;
  bool zmm = (xcr0 & 0xe6) == 0xe6;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm && ((b >> 5) & 1);
  f.fma = ymm && fma;
  f.f16c = ymm && f16c;
  f.avx512f = zmm && ((b >> 16) & 1);
  f.avx512bw = zmm && ((b >> 30) & 1);
  f.avx512dq = zmm && ((b >> 17) & 1);
  f.avx512vl = zmm && ((b >> 31) & 1);
  f.avx512_vnni = zmm && ((c >> 11) & 1);
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = zmm && ((a >> 5) & 1);
  __cpuid(0, a, b, c, d);
  f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
#endif
  if (const char* cap = std::getenv("MLXB_CPU")) {
    if (std::strcmp(cap, "scalar") == 0) f = CpuFeatures{};
    if (std::strcmp(cap, "avx2") == 0) {
      f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512_bf16 = f.avx512_vnni = false;
    }
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

}  // namespace mlxb
