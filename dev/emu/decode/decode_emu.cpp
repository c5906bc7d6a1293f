// Runs the generation kernels (decode.cu) on the host through the emulation of CUDA threads, barriers and warp
// shuffles in dev/emu/attention/emu_rt.h, and compares them with the CPU backend's ops (the reference that
// tests/cuda/generate_cuda.cpp uses on a GPU), fed as generation feeds them: a prefill part, then one token per
// sequence through the kept state. A development check of the kernels' index math, reductions and state
// hand-over without a GPU; an optional target (dev/CMakeLists.txt, DT_BUILD_EMULATORS; static __shared__
// arrays become function statics: the emulation runs one block at a time), or by hand:
//   g++ -std=c++20 -O2 -w -DDT_DECODE_EMU -I kernels -I dev -I engine/src -I /usr/local/cuda/include \
//       dev/emu/decode/decode_emu.cpp build/engine/libdt_engine.a -lpcre2-8 -lutf8proc -lyaml-cpp -lsqlite3 \
//       -lpthread -o /tmp/decode_emu && /tmp/decode_emu
#include "emu/attention/emu_rt.h"
#undef __shared__
#define __shared__ static
#include "decode/decode.cu"

#include <cstdio>
#include <random>
#include <vector>

#include "backend/backend.h"

using namespace deltatune;
using namespace deltatune::kernels;

namespace {

alignas(16) unsigned char no_smem[16];
std::mt19937 rng(7);

std::vector<float> rand_vec(size_t n, float lo, float hi, bool bf16) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = u(rng);
    if (bf16) x = __bfloat162float(__float2bfloat16_rn(x));
  }
  return v;
}
Tensor host(const std::vector<float>& v, Shape s) {
  Tensor t = host_tensor(s);
  std::copy(v.begin(), v.end(), t.ptr<float>());
  return t;
}
Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = host_tensor({int64_t(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}
KIn kin(const std::vector<float>& v) { return KIn{v.data(), KType::F32}; }
KOut kout(std::vector<float>& v) { return KOut{v.data(), KType::F32}; }

int failures = 0;
void report(const char* what, const std::vector<float>& got, const float* ref) {
  double num = 0, den = 0, mx = 0;
  int nonfinite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++nonfinite;
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    mx = std::max(mx, std::fabs(d));
  }
  const double nmse = num / std::max(den, 1e-300);
  const bool ok = nonfinite == 0 && nmse < 1e-9;
  failures += !ok;
  std::printf("%-40s nmse %.2e  max|d| %.2e  %s\n", what, nmse, mx, ok ? "ok" : "FAIL");
}

// Sequences of `full` tokens cut after `first`: part 0 the prefill, part 1 the rest.
struct Parts {
  std::vector<int32_t> full, first;
  std::vector<int32_t> cu(int part) const {
    std::vector<int32_t> c{0};
    for (size_t n = 0; n < full.size(); ++n) c.push_back(c.back() + (part == 0 ? first[n] : full[n] - first[n]));
    return c;
  }
  std::vector<int32_t> pos(int part) const {
    std::vector<int32_t> p;
    for (size_t n = 0; n < full.size(); ++n)
      for (int32_t i = part == 0 ? 0 : first[n]; i < (part == 0 ? first[n] : full[n]); ++i) p.push_back(i);
    return p;
  }
  SeqLayout layout(int part) const {
    SeqLayout s;
    s.host_cu_seqlens = cu(part);
    s.cu_seqlens = host_i32(s.host_cu_seqlens);
    s.positions = host_i32(pos(part));
    return s;
  }
};
const Parts kParts{{70, 2, 9}, {69, 1, 8}};

void check_conv(Backend& cpu, int K) {
  const int64_t C = 40;
  const auto w = rand_vec(C * K, -1.f, 1.f, false);
  std::vector<float> state(3 * (K - 1) * C, 0.f);
  Tensor st_ref = host(state, {3, K - 1, C});
  for (int part = 0; part < 2; ++part) {
    const auto cu = kParts.cu(part);
    const int64_t T = cu.back();
    const auto x = rand_vec(T * C, -2.f, 2.f, true);
    std::vector<float> y(T * C, NAN);
    emu::launch(dim3(grid_for(3 * C, 256, 1LL << 30)), 256, no_smem, 0,
                [&] { conv_step_kernel(kin(x), kin(w), cu.data(), 3, kout(state), kout(y), C, K); });
    Tensor y_ref = host_tensor({T, C});
    cpu.conv1d_silu_step(host(x, {T, C}), host(w, {C, K}), kParts.layout(part), st_ref, y_ref);
    report(("conv1d_silu_step y K=" + std::to_string(K) + " part " + std::to_string(part)).c_str(), y, y_ref.ptr<float>());
    report(("conv1d_silu_step state K=" + std::to_string(K) + " part " + std::to_string(part)).c_str(), state,
           st_ref.ptr<float>());
  }
}

void check_recurrent(Backend& cpu, int HK, int HV, int dk, int dv) {
  std::vector<float> state(3 * HV * dk * dv, 0.f);
  Tensor st_ref = host(state, {3, HV, dk, dv});
  const float scale = 1.f / std::sqrt(float(dk));
  const std::string tag = " HK=" + std::to_string(HK) + " HV=" + std::to_string(HV) + " dk=" + std::to_string(dk) +
                          " dv=" + std::to_string(dv);
  for (int part = 0; part < 2; ++part) {
    const auto cu = kParts.cu(part);
    const int64_t T = cu.back();
    const auto q = rand_vec(T * HK * dk, -1.f, 1.f, true), k = rand_vec(T * HK * dk, -1.f, 1.f, true),
               v = rand_vec(T * HV * dv, -1.f, 1.f, true), g = rand_vec(T * HV, -1.f, -0.01f, false),
               beta = rand_vec(T * HV, 0.f, 1.f, false);
    std::vector<float> o(T * HV * dv, NAN);
    emu::launch(dim3(3 * HV, (dv + kRecCols - 1) / kRecCols), kRecThreads, no_smem, 0, [&] {
      gdn_recurrent_kernel(kin(q), kin(k), kin(v), kin(g), kin(beta), cu.data(), state.data(), kout(o), HK, HV, dk,
                           dv, scale);
    });
    Tensor o_ref = host_tensor({T, HV, dv});
    cpu.gdn_recurrent(host(q, {T, HK, dk}), host(k, {T, HK, dk}), host(v, {T, HV, dv}), host(g, {T, HV}),
                      host(beta, {T, HV}), kParts.layout(part), scale, st_ref, o_ref);
    report(("gdn_recurrent o" + tag + " part " + std::to_string(part)).c_str(), o, o_ref.ptr<float>());
    report(("gdn_recurrent state" + tag + " part " + std::to_string(part)).c_str(), state, st_ref.ptr<float>());
  }
}

void check_attention(Backend& cpu, int nH, int nKV, int hd) {
  const int64_t L = 80;
  std::vector<float> kc(3 * L * nKV * hd, 0.f), vc(kc.size(), 0.f);
  Tensor kc_ref = host(kc, {3, L, nKV, hd}), vc_ref = host(vc, {3, L, nKV, hd});
  const std::string tag = " nH=" + std::to_string(nH) + " nKV=" + std::to_string(nKV) + " hd=" + std::to_string(hd);
  for (int part = 0; part < 2; ++part) {
    const auto cu = kParts.cu(part);
    const auto pos = kParts.pos(part);
    const int64_t T = cu.back(), row = nKV * hd;
    const auto q = rand_vec(T * nH * hd, -2.f, 2.f, true), k = rand_vec(T * row, -2.f, 2.f, true),
               v = rand_vec(T * row, -1.f, 1.f, true);
    emu::launch(dim3(grid_for(T * row, 256)), 256, no_smem, 0, [&] {
      kv_write_kernel(kin(k), kin(v), cu.data(), 3, pos.data(), kout(kc), kout(vc), T, L, row);
    });
    std::vector<float> o(T * nH * hd, NAN);
    emu::launch(dim3(T * nH), kAttnWarps * 32, no_smem, 0, [&] {
      attention_cached_kernel(kin(q), kin(kc), kin(vc), cu.data(), 3, pos.data(), kout(o), nH, nKV, hd, L, 0.125f);
    });
    const SeqLayout seq = kParts.layout(part);
    cpu.kv_cache_write(host(k, {T, nKV, hd}), host(v, {T, nKV, hd}), seq, kc_ref, vc_ref);
    Tensor o_ref = host_tensor({T, nH, hd});
    cpu.attention_cached(host(q, {T, nH, hd}), kc_ref, vc_ref, seq, 0.125f, o_ref);
    report(("kv_cache_write" + tag + " part " + std::to_string(part)).c_str(), kc, kc_ref.ptr<float>());
    report(("attention_cached" + tag + " part " + std::to_string(part)).c_str(), o, o_ref.ptr<float>());
  }
}

}  // namespace

int main() {
  auto cpu = make_cpu_backend(1);
  check_conv(*cpu, 4);
  check_conv(*cpu, 2);
  check_recurrent(*cpu, 2, 4, 16, 24);
  check_recurrent(*cpu, 1, 2, 128, 40);
  check_attention(*cpu, 4, 2, 32);
  check_attention(*cpu, 2, 1, 72);
  std::printf("%s\n", failures ? "FAILED" : "all ok");
  return failures ? 1 : 0;
}
