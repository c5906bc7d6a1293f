// Runs the tensor-core attention kernels on the host through an emulation of the CUDA threads, barriers,
// ldmatrix and mma.sync (emu_rt.h, emu_mma.h: built from the PTX ISA fragment definitions, not from the
// kernels' address math) and compares them with a double-precision reference; `hopper` runs the wgmma kernels
// of the Hopper policy instead (hd 256, nH / nKV even; emu_wgmma.h). A development check of the kernels'
// fragment layouts, masking and tiling on a machine without a GPU; not part of the build:
//   g++ -std=c++20 -O2 -w -DDT_ATTN_EMU -I kernels -I dev -I /usr/local/cuda/include \
//       dev/emu/attention/*.cpp -o /tmp/attention_emu -lpthread &&
//   /tmp/attention_emu [hd [nH nKV [portable|full|hopper|hopper-full]]]
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.cuh"
#include "attention/attention_tile_list.h"
#include "emu/attention/emu_rt.h"

namespace deltatune::kernels {
void emu_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* cu,
                       const int32_t* tiles, int ntiles, int nH, int nKV, int hd, float scale, bool causal, KOut o,
                       float* lse, bool hopper);
void emu_attention_bwd(const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, const float* lse, const float* dl, const int32_t* cu,
                       const int32_t* q_tiles, const int32_t* k_tiles, int ntiles, int64_t T, int nH, int nKV, int hd,
                       float scale, bool causal, KOut dq, KOut dk, KOut dv, float* part, bool portable,
                       bool hopper);
}  // namespace deltatune::kernels

using namespace deltatune::kernels;

static float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

static double nmse(const std::vector<float>& got, const std::vector<double>& ref, int* nonfinite) {
  double num = 0, den = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) ++*nonfinite;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return num / std::max(den, 1e-300);
}

int main(int argc, char** argv) {
  const int hd = argc > 1 ? std::atoi(argv[1]) : 64;
  const int nH = argc > 2 ? std::atoi(argv[2]) : 4, nKV = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::vector<int32_t> cu = {0, 1, 16, 80, 145, 275};  // lengths 1, 15, 64, 65, 130
  const int64_t T = cu.back();
  const std::string mode = argc > 4 ? argv[4] : "";
  const bool portable = mode == "portable";                 // the portable policy's dK/dV steps
  const bool causal = mode != "full" && mode != "hopper-full";  // full: every key of the sequence
  const bool hopper = mode.rfind("hopper", 0) == 0;         // the wgmma kernels
  if (hopper && (hd != 256 || (nH / nKV) % 2)) {
    std::fprintf(stderr, "hopper: the wgmma kernels take hd 256 and an even nH / nKV\n");
    return 2;
  }
  const int rep = nH / nKV;
  const float scale = 1.f / std::sqrt(float(hd));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto make = [&](int64_t n, float amp) {
    std::vector<float> f(n);
    for (auto& x : f) x = round_bf16(amp * u(rng));
    return f;
  };
  std::vector<float> q = make(T * nH * hd, 2.f), k = make(T * nKV * hd, 2.f), v = make(T * nKV * hd, 1.f),
                     dout = make(T * nH * hd, 1.f);
  auto to_bf = [](const std::vector<float>& f) {
    std::vector<__nv_bfloat16> b(f.size());
    for (size_t i = 0; i < f.size(); ++i) b[i] = __float2bfloat16_rn(f[i]);
    return b;
  };
  auto qb = to_bf(q), kb = to_bf(k), vb = to_bf(v), db = to_bf(dout);

  // Reference (double).
  std::vector<double> o_ref(T * nH * hd, 0), lse_ref(T * nH, 0), dq_ref(T * nH * hd, 0), dk_ref(T * nKV * hd, 0),
      dv_ref(T * nKV * hd, 0);
  std::vector<float> o_in(T * nH * hd);  // reference o rounded to bf16: the backward's input
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int h = 0; h < nH; ++h) {
      const int g = h / rep;
      for (int i = cu[n]; i < cu[n + 1]; ++i) {
        const int jend = causal ? i : cu[n + 1] - 1;
        std::vector<double> s(jend - cu[n] + 1);
        double mx = -1e300;
        for (int j = cu[n]; j <= jend; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += double(q[(i * nH + h) * hd + c]) * k[(j * nKV + g) * hd + c];
          s[j - cu[n]] = scale * d;
          mx = std::max(mx, s[j - cu[n]]);
        }
        double sum = 0;
        for (double& x : s) sum += std::exp(x - mx);
        lse_ref[i * nH + h] = mx + std::log(sum);
        for (int j = cu[n]; j <= jend; ++j) {
          const double p = std::exp(s[j - cu[n]] - lse_ref[i * nH + h]);
          for (int c = 0; c < hd; ++c) o_ref[(i * nH + h) * hd + c] += p * v[(j * nKV + g) * hd + c];
        }
        double D = 0;
        for (int c = 0; c < hd; ++c) {
          o_in[(i * nH + h) * hd + c] = round_bf16(float(o_ref[(i * nH + h) * hd + c]));
          D += double(dout[(i * nH + h) * hd + c]) * o_in[(i * nH + h) * hd + c];
        }
        for (int j = cu[n]; j <= jend; ++j) {
          const double p = std::exp(s[j - cu[n]] - lse_ref[i * nH + h]);
          double dp = 0;
          for (int c = 0; c < hd; ++c) dp += double(dout[(i * nH + h) * hd + c]) * v[(j * nKV + g) * hd + c];
          const double ds = p * (dp - D);
          for (int c = 0; c < hd; ++c) {
            dv_ref[(j * nKV + g) * hd + c] += p * dout[(i * nH + h) * hd + c];
            dq_ref[(i * nH + h) * hd + c] += scale * ds * k[(j * nKV + g) * hd + c];
            dk_ref[(j * nKV + g) * hd + c] += scale * ds * q[(i * nH + h) * hd + c];
          }
        }
      }
    }

  // Tile lists as the host builds them (query-cost order, then key-cost order in pairs of one sequence).
  const std::vector<int32_t> tl = attention_mma_tile_list(cu);
  const int ntiles = int(tl.size() / 4);
  const std::vector<int32_t> qt(tl.begin(), tl.begin() + 2 * ntiles), kt(tl.begin() + 2 * ntiles, tl.end());

  const float nan = std::nanf("");
  std::vector<float> o(T * nH * hd, nan), lse(T * nH, nan);
  emu_attention_fwd(qb.data(), kb.data(), vb.data(), cu.data(), qt.data(), ntiles, nH, nKV, hd, scale, causal,
                    KOut{o.data(), KType::F32}, lse.data(), hopper);
  int bad = 0, fails = 0;
  double e = nmse(o, o_ref, &bad);
  std::printf("fwd o    nmse %.3e nonfinite %d\n", e, bad);
  fails += e > 1e-4 || bad;
  e = nmse(lse, lse_ref, &bad);
  std::printf("fwd lse  nmse %.3e nonfinite %d\n", e, bad);
  fails += e > 1e-8 || bad;

  std::vector<float> dl(T * nH);
  for (int64_t r = 0; r < T * nH; ++r) {
    double D = 0;
    for (int c = 0; c < hd; ++c) D += double(dout[r * hd + c]) * o_in[r * hd + c];
    dl[r] = float(D);
  }
  std::vector<float> lse_in(lse_ref.begin(), lse_ref.end());
  std::vector<float> dq(T * nH * hd, nan), dk(T * nKV * hd, nan), dv(T * nKV * hd, nan), part(2 * T * nH * hd, nan);
  emu_attention_bwd(db.data(), qb.data(), kb.data(), vb.data(), lse_in.data(), dl.data(), cu.data(), qt.data(),
                    kt.data(), ntiles, T, nH, nKV, hd, scale, causal, KOut{dq.data(), KType::F32}, KOut{dk.data(), KType::F32},
                    KOut{dv.data(), KType::F32}, part.data(), portable, hopper);
  for (auto [name, got, ref] : {std::tuple{"dq", &dq, &dq_ref}, std::tuple{"dk", &dk, &dk_ref},
                                std::tuple{"dv", &dv, &dv_ref}}) {
    e = nmse(*got, *ref, &bad);
    std::printf("bwd %s   nmse %.3e nonfinite %d\n", name, e, bad);
    fails += e > 5e-4 || bad;
  }
  std::printf("%s (hd %d, nH %d, nKV %d, T %lld, %s%s)\n", fails ? "FAIL" : "OK", hd, nH, nKV, (long long)T,
              causal ? "causal" : "full", hopper ? ", wgmma" : portable ? ", portable" : "");
  return fails ? 1 : 0;
}
