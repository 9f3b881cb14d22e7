// Fused quantized projections (models/fuse_quant.h through fuse_projections): q/k/v and gate/up
// of MLX affine-quantized layers stacked into one weight give, bit for bit, the parts' outputs
// side by side; the parts become views with unchanged results; layers that differ in bits,
// group size, scale dtype or bias presence are left alone; the fused gate/up through
// qgated_matmul equals gated_act of the parts, and bad qgated_matmul shapes are typed errors.
// CPU only (the fused layout is the same on every device). Prints "all quant fuse checks passed"
// and exits 0 on success.
// Run by test/quant-fuse-native.test.ts.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/blocks.h"
#include "quant/affine.h"

using namespace mlxb;

namespace {

std::mt19937 rng(77);
int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) ++failures;
  std::printf("%-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
}

Tensor random_f32(const Shape& shape, float scale) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = n(rng);
  return t;
}

Linear quant_linear(int64_t out, int64_t in, int bits, int gs, DType sd, bool bias) {
  Linear l;
  l.out = out;
  l.in = in;
  l.q = quant::quantize(random_f32({out, in}, 0.05f), bits, gs, sd);
  if (bias) l.bias = random_f32({out}, 0.1f);
  return l;
}

Tensor run(const Linear& l, const Tensor& x) {
  Tensor y = Tensor::empty({x.dim(0), l.out}, DType::F32);
  linear(x, l, y);
  return y;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

// The fused output's columns [c0, c0 + part.out) equal the part's output, bit for bit.
bool columns_equal(const Tensor& fused, int64_t c0, const Tensor& part) {
  const int64_t m = part.dim(0), n = part.dim(1), nf = fused.dim(1);
  for (int64_t i = 0; i < m; ++i)
    if (std::memcmp(fused.ptr<float>() + i * nf + c0, part.ptr<float>() + i * n, static_cast<size_t>(n) * 4) != 0) return false;
  return true;
}

void check_fused(int bits, int gs, DType sd, bool bias, int64_t m) {
  const int64_t h = 256, qd = 256, kvd = 64, f = 320;
  AttentionWeights attn;
  attn.q = quant_linear(qd, h, bits, gs, sd, bias);
  attn.k = quant_linear(kvd, h, bits, gs, sd, bias);
  attn.v = quant_linear(kvd, h, bits, gs, sd, bias);
  MlpWeights mlp;
  mlp.gate = quant_linear(f, h, bits, gs, sd, false);
  mlp.up = quant_linear(f, h, bits, gs, sd, false);
  const AttentionWeights before_attn = attn;
  const MlpWeights before_mlp = mlp;
  Tensor x = random_f32({m, h}, 1.0f);
  fuse_projections(attn, mlp);
  const std::string tag = std::to_string(bits) + "-bit g" + std::to_string(gs) + " " + dtype_name(sd) + (bias ? " +bias" : "") +
                          " M=" + std::to_string(m);
  expect(attn.qkv.quantized() && attn.qkv.out == qd + 2 * kvd && attn.qkv.q.rows == qd + 2 * kvd, "qkv fused: " + tag);
  expect(mlp.gate_up.quantized() && mlp.gate_up.out == 2 * f, "gate_up fused: " + tag);
  if (!attn.qkv.quantized() || !mlp.gate_up.quantized()) return;
  Tensor qkv = run(attn.qkv, x);
  expect(columns_equal(qkv, 0, run(before_attn.q, x)) && columns_equal(qkv, qd, run(before_attn.k, x)) &&
             columns_equal(qkv, qd + kvd, run(before_attn.v, x)),
         "qkv output = [q, k, v] outputs bit for bit: " + tag);
  Tensor gu = run(mlp.gate_up, x);
  expect(columns_equal(gu, 0, run(before_mlp.gate, x)) && columns_equal(gu, f, run(before_mlp.up, x)),
         "gate_up output = [gate, up] outputs bit for bit: " + tag);
  // The one-token MLP path (blocks.cc) runs qgated_matmul on the fused weight: act(gate) * up,
  // bit for bit what gated_act makes of the two parts' outputs.
  for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
    Tensor g = run(before_mlp.gate, x), u = run(before_mlp.up, x), want = Tensor::empty({m, f}, DType::F32);
    ops::gated_act(g, u, act, want);
    Tensor got = Tensor::empty({m, f}, DType::F32);
    ops::qgated_matmul(x, mlp.gate_up.q, nullptr, act, got);
    expect(same_bits(got, want), "qgated_matmul(gate_up) = gated_act(gate, up) bit for bit: " + tag);
  }
  expect(same_bits(run(attn.k, x), run(before_attn.k, x)) && same_bits(run(mlp.up, x), run(before_mlp.up, x)) &&
             attn.k.q.packed.storage() == attn.qkv.q.packed.storage(),
         "parts are views of the fused weight with unchanged outputs: " + tag);
}

void check_left_alone() {
  const int64_t h = 128;
  struct Case {
    const char* what;
    int kbits, kgs;
    DType ksd;
    bool kbias;
  } cases[] = {{"k at 8 bits", 8, 64, DType::BF16, false},
               {"k with group size 32", 4, 32, DType::BF16, false},
               {"k with float16 scales", 4, 64, DType::F16, false},
               {"k with a bias", 4, 64, DType::BF16, true}};
  for (const auto& c : cases) {
    AttentionWeights attn;
    attn.q = quant_linear(128, h, 4, 64, DType::BF16, false);
    attn.k = quant_linear(64, h, c.kbits, c.kgs, c.ksd, c.kbias);
    attn.v = quant_linear(64, h, 4, 64, DType::BF16, false);
    MlpWeights mlp;
    mlp.gate = quant_linear(96, h, 4, 64, DType::BF16, false);
    Linear dense;
    dense.out = 96;
    dense.in = h;
    dense.w = random_f32({96, h}, 0.05f);
    mlp.up = dense;  // quantized gate with a dense up: mixed, never fused
    const void* kp = attn.k.q.packed.data();
    fuse_projections(attn, mlp);
    expect(!attn.qkv.quantized() && !attn.qkv.w.defined() && attn.k.q.packed.data() == kp && attn.k.q.bits == c.kbits,
           std::string("not fused, parts untouched: ") + c.what);
    expect(!mlp.gate_up.quantized() && !mlp.gate_up.w.defined(), std::string("quantized gate + dense up not fused (") + c.what + ")");
  }
}

// A weight without an even row count, or an output that is not half its rows, is a typed error.
void check_qgated_errors() {
  const QuantWeight w = quant::quantize(random_f32({6, 64}, 0.05f), 4, 32, DType::BF16);
  Tensor x = random_f32({1, 64}, 1.0f);
  for (int64_t cols : {int64_t(2), int64_t(4)}) {
    Tensor out = Tensor::empty({1, cols}, DType::F32);
    bool typed = false;
    try {
      ops::qgated_matmul(x, w, nullptr, Activation::kSiLU, out);
    } catch (const Error& e) {
      typed = e.code() == ErrorCode::kInvalidArgument;
    }
    expect(typed, "qgated_matmul with out [1, " + std::to_string(cols) + "] for 6 weight rows is kInvalidArgument");
  }
}

}  // namespace

int main() {
  try {
    check_fused(4, 64, DType::BF16, false, 1);
    check_fused(4, 64, DType::BF16, true, 5);
    check_fused(8, 32, DType::F32, false, 3);
    check_fused(3, 128, DType::F16, true, 1);
    check_fused(6, 64, DType::BF16, false, 17);
    check_left_alone();
    check_qgated_errors();
  } catch (const Error& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  if (failures) {
    std::printf("%d quant fuse check(s) failed\n", failures);
    return 1;
  }
  std::printf("all quant fuse checks passed\n");
  return 0;
}
