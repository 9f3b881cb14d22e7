// What the CPU we run on can do, asked once at run time: kernels pick AVX-512 / AVX2 / scalar
// paths by this, never by the compiler's -march (the binary must run on any x86-64).
#pragma once

namespace mlxb {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool amd = false;  // vendor "AuthenticAMD" (Zen 4/5 run vdpbf16ps at the rate of a float32 FMA)
};

const CpuFeatures& cpu_features();  // MLXB_CPU=scalar|avx2|avx512 caps it (for tests)

}  // namespace mlxb
