// Runs the grouped expert GEMM kernel (kernels/moe/grouped_gemm.cu) on the host through the CUDA emulation
// of dev/emu/attention (threads, barriers, mma.sync from the PTX fragment definitions) and compares it
// with a double-precision reference on the same bf16 inputs. A development check of the tile map, the
// operand loaders (vector and scalar, k- and row-contiguous), the fragment use and the epilogue on a
// machine without a GPU; not part of the build:
//   g++ -std=c++20 -O2 -w -DDT_ATTN_EMU -I kernels -I dev -I /usr/local/cuda/include \
//       dev/emu/moe/grouped_gemm_emu.cpp -o /tmp/grouped_gemm_emu -lpthread && /tmp/grouped_gemm_emu
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu/attention/emu_rt.h"
namespace deltatune::kernels {
namespace {
alignas(16) unsigned char smem_raw[81920];  // the largest kernel's: pipe_smem(kBigM, kBigN) (checked below)
}
}  // namespace deltatune::kernels
#include "moe/grouped_gemm.cu"
static_assert(deltatune::kernels::pipe_smem(deltatune::kernels::kBigM, deltatune::kernels::kBigN) <= sizeof(deltatune::kernels::smem_raw));

using namespace deltatune::kernels;

namespace {

std::mt19937 rng(5);

std::vector<__nv_bfloat16> rand_bf16(size_t n) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16_rn(u(rng));
  return v;
}
double f(__nv_bfloat16 x) { return __bfloat162float(x); }

std::vector<int32_t> offsets_of(const std::vector<int32_t>& counts) {
  std::vector<int32_t> off{0};
  for (int32_t c : counts) off.push_back(off.back() + c);
  return off;
}

int failures = 0;

void report(const std::string& name, const std::vector<float>& got, const std::vector<double>& ref,
            const std::vector<char>& written) {
  double num = 0, den = 0;
  int64_t bad_untouched = 0, nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!written[i]) {  // must keep the sentinel
      bad_untouched += got[i] != -7.f;
      continue;
    }
    if (!std::isfinite(got[i])) ++nonfinite;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double nmse = num / std::max(den, 1e-300);
  const bool ok = nmse < 1e-10 && bad_untouched == 0 && nonfinite == 0;
  failures += !ok;
  std::printf("%-4s %-60s nmse %.2e  untouched-overwritten %lld  nonfinite %lld\n", ok ? "ok" : "FAIL", name.c_str(),
              nmse, (long long)bad_untouched, (long long)nonfinite);
}

// Whether main's second pass runs the cp.async ring kernel (grouped_mma_pipe_kernel) where the launcher would:
// both operands vector-loadable.
bool g_pipe = false;
std::vector<float> g_generic;  // G from the generic ring, for the rank ring's bit comparison

template <int BM, int BN, int WM, int WN, bool WGRAD>
void run(const TileArgs& a, dim3 grid) {
  if (g_pipe && a.a_vec && a.b_vec)
    emu::launch(grid, WM * WN * 32, smem_raw, pipe_smem(BM, BN), [&] { grouped_mma_pipe_kernel<BM, BN, WM, WN, WGRAD>(a); });
  else
    emu::launch(grid, WM * WN * 32, smem_raw, tile_smem(BM, BN), [&] { grouped_mma_kernel<BM, BN, WM, WN, WGRAD>(a); });
}

// Forward form: y[r] = alpha·x[r]·op(W_e) + beta·y[r]; F32 output, y pre-filled with -7 (rows past off[E] keep it).
template <bool WGRAD>
void run_fma(const TileArgs& a, dim3 grid) {
  emu::launch(grid, 256, smem_raw, fma_smem(), [&] { grouped_fma_kernel<WGRAD>(a); });
}

// F32 copy of bf16 data (the fp32 kernel's operands).
std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = __bfloat162float(v[i]);
  return f;
}

void forward(const std::vector<int32_t>& counts, int64_t extra_rows, int64_t N, int64_t K, bool trans, float alpha,
             float beta, bool misalign, bool fp32 = false) {
  const int E = static_cast<int>(counts.size());
  const std::vector<int32_t> off = offsets_of(counts);
  const int64_t M = off.back() + extra_rows;
  std::vector<__nv_bfloat16> xs = rand_bf16(size_t(M * K + 8)), ws = rand_bf16(size_t(E * N * K + 8));
  const __nv_bfloat16* x = xs.data() + (misalign ? 1 : 0);  // 2-byte offset: forces the scalar loads
  const __nv_bfloat16* w = ws.data();
  std::vector<float> y(size_t(M * N), -7.f);
  std::vector<double> ref(y.size(), -7.0);
  std::vector<char> written(y.size(), 0);
  for (int e = 0; e < E; ++e)
    for (int64_t r = off[e]; r < off[e + 1]; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += f(x[r * K + k]) * f(trans ? w[(e * N + n) * K + k] : w[(e * K + k) * N + n]);
        ref[r * N + n] = alpha * acc + beta * -7.0;
        written[r * N + n] = 1;
      }
  const bool skinny = N <= kSkN, thin = g_pipe && fp32 && K <= kThinK;  // second pass: the launcher's choice
  const int bm = fp32 ? kFM : skinny ? kSkM : kBigM, bn = thin ? kThinN : fp32 ? kFN : skinny ? kSkN : kBigN;
  std::vector<int32_t> tile_off{0};
  for (int e = 0; e < E; ++e) tile_off.push_back(tile_off.back() + (counts[e] + bm - 1) / bm);
  const std::vector<float> xf = to_f32(xs), wf = to_f32(ws);
  TileArgs a{};
  a.a = fp32 ? static_cast<const void*>(xf.data() + (misalign ? 1 : 0)) : x;
  a.a_sm = K;
  a.a_sk = 1;
  a.b = fp32 ? static_cast<const void*>(wf.data()) : w;
  a.b_se = N * K;
  a.b_sn = trans ? K : 1;
  a.b_sk = trans ? 1 : N;
  a.a_vec = !misalign && K % 8 == 0;
  a.b_vec = trans ? K % 8 == 0 : N % 8 == 0;
  a.c = KOut{y.data(), KType::F32};
  a.ldc = N;
  a.offsets = off.data();
  a.tile_off = tile_off.data();
  a.E = E;
  a.M = M;
  a.N = N;
  a.K = K;
  a.alpha = alpha;
  a.beta = beta;
  const dim3 grid(static_cast<unsigned>((M + bm - 1) / bm + E), static_cast<unsigned>((N + bn - 1) / bn));
  if (thin) emu::launch(grid, 256, smem_raw, thin_smem(), [&] { grouped_fma_thin_kernel(a); });
  else if (fp32) run_fma<false>(a, grid);
  else if (skinny) run<kSkM, kSkN, kSkWM, kSkWN, false>(a, grid);
  else run<kBigM, kBigN, kBigWM, kBigWN, false>(a, grid);
  report(std::string(thin ? "fp32 thin " : fp32 ? "fp32 " : "") + "grouped_gemm E=" + std::to_string(E) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
             " K=" + std::to_string(K) + (trans ? " Wt" : " W") + (misalign ? " scalar-x" : "") +
             (fp32 ? "" : skinny ? " skinny" : " big") + (g_pipe && a.a_vec && a.b_vec && !fp32 ? " ring" : "") +
             " beta " + std::to_string(beta),
         y, ref, written);
}

// Weight-gradient form: G_e = alpha·Σ a[r]ᵀ b[r] + beta·G_e (G pre-filled with 0.5).
void wgrad(const std::vector<int32_t>& counts, int64_t N, int64_t K, float alpha, float beta, bool fp32 = false) {
  const int E = static_cast<int>(counts.size());
  const std::vector<int32_t> off = offsets_of(counts);
  const int64_t M = off.back();
  std::vector<__nv_bfloat16> as = rand_bf16(size_t(M * N)), bs = rand_bf16(size_t(M * K));
  std::vector<float> g(size_t(E * N * K), 0.5f);
  std::vector<double> ref(g.size());
  std::vector<char> written(g.size(), 1);
  for (int e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        double acc = 0;
        for (int64_t r = off[e]; r < off[e + 1]; ++r) acc += f(as[r * N + n]) * f(bs[r * K + k]);
        ref[(e * N + n) * K + k] = alpha * acc + beta * 0.5;
      }
  const std::vector<float> af = to_f32(as), bf = to_f32(bs);
  TileArgs a{};
  a.a = fp32 ? static_cast<const void*>(af.data()) : as.data();
  a.a_sm = 1;
  a.a_sk = N;
  a.b = fp32 ? static_cast<const void*>(bf.data()) : bs.data();
  a.b_sn = 1;
  a.b_sk = K;
  a.a_vec = N % 8 == 0;
  a.b_vec = K % 8 == 0;
  a.c = KOut{g.data(), KType::F32};
  a.ldc = K;
  a.c_se = N * K;
  a.offsets = off.data();
  a.E = E;
  a.M = N;
  a.N = K;
  a.alpha = alpha;
  a.beta = beta;
  // The launcher's tile choice: rank rows (gA-like), rank columns (gB-like), skinny, big; the rank tiles' i-major
  // ring (RANK) in the second pass where the launcher takes it.
  const bool rank_rows = !fp32 && N <= kRkM && K > kRkM, rank_cols = !fp32 && !rank_rows && K <= kRkM;
  const bool skinny = K <= kSkN;
  const bool rank_ring = g_pipe && (rank_rows || rank_cols) && a.a_vec && a.b_vec && N > 1 && K > 1;
  const int bm = fp32 ? kFM : rank_rows ? kRkM : rank_cols ? kRkLong : skinny ? kSkM : kBigM;
  const int bn = fp32 ? kFN : rank_rows ? kRkLong : rank_cols ? kRkM : skinny ? kSkN : kBigN;
  const dim3 grid(static_cast<unsigned>((N + bm - 1) / bm), static_cast<unsigned>((K + bn - 1) / bn), E);
  if (rank_ring) {  // the i-major ring gives the generic ring's bits: run that first on a copy of G
    std::vector<float> g2 = g;
    TileArgs a2 = a;
    a2.c = KOut{g2.data(), KType::F32};
    if (rank_rows)
      emu::launch(grid, 32 * kRkWarps, smem_raw, pipe_smem(kRkM, kRkLong),
                  [&] { grouped_mma_pipe_kernel<kRkM, kRkLong, 1, kRkWarps, true>(a2); });
    else
      emu::launch(grid, 32 * kRkWarps, smem_raw, pipe_smem(kRkLong, kRkM),
                  [&] { grouped_mma_pipe_kernel<kRkLong, kRkM, kRkWarps, 1, true>(a2); });
    g_generic = std::move(g2);
  }
  if (fp32) run_fma<true>(a, grid);
  else if (rank_ring && rank_rows)
    emu::launch(grid, 32 * kRkWarps, smem_raw, rank_pipe_smem<kRkM, kRkLong>(),
                [&] { grouped_mma_pipe_kernel<kRkM, kRkLong, 1, kRkWarps, true, true>(a); });
  else if (rank_ring)
    emu::launch(grid, 32 * kRkWarps, smem_raw, rank_pipe_smem<kRkLong, kRkM>(),
                [&] { grouped_mma_pipe_kernel<kRkLong, kRkM, kRkWarps, 1, true, true>(a); });
  else if (rank_rows) run<kRkM, kRkLong, 1, kRkWarps, true>(a, grid);
  else if (rank_cols) run<kRkLong, kRkM, kRkWarps, 1, true>(a, grid);
  else if (skinny) run<kSkM, kSkN, kSkWM, kSkWN, true>(a, grid);
  else run<kBigM, kBigN, kBigWM, kBigWN, true>(a, grid);
  report(std::string(fp32 ? "fp32 " : "") + "grouped_gemm_wgrad E=" + std::to_string(E) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
             (fp32 ? "" : rank_rows ? " rank-rows" : rank_cols ? " rank-cols" : skinny ? " skinny" : " big") +
             (rank_ring ? " rank-ring" : "") + (g_pipe && a.a_vec && a.b_vec && !fp32 ? " ring" : "") +
             " beta " + std::to_string(beta),
         g, ref, written);
  if (rank_ring) {
    const bool same = std::memcmp(g.data(), g_generic.data(), g.size() * sizeof(float)) == 0;
    failures += !same;
    std::printf("%-4s   rank ring vs generic ring: %s\n", same ? "ok" : "FAIL", same ? "same bits" : "bits differ");
  }
}

}  // namespace

int main() {
  for (int pass = 0; pass < 2; ++pass) {
  g_pipe = pass == 1;
  // Big tiles: an expert spanning two row tiles (130), empty experts (incl. the first and the last), a
  // partial n tile; vector loads (K, N multiples of 8) and scalar ones (K = 33, misaligned x).
  forward({0, 100, 0, 130, 33, 0}, 3, 40, 72, true, 1.f, 0.f, false);
  forward({0, 100, 0, 130, 33, 0}, 3, 136, 72, false, 0.5f, 1.f, false);
  forward({70, 5, 129}, 0, 136, 33, true, 1.f, 0.f, false);
  forward({70, 5, 129}, 0, 40, 48, false, 1.f, 0.25f, true);
  // Skinny N (LoRA rank): u = x·A_eᵀ (Wt, N = r) and du = dy·B_e (W, N = r).
  forward({12, 0, 140, 1}, 2, 16, 64, true, 1.f, 0.f, false);
  forward({12, 0, 140, 1}, 2, 16, 40, false, 2.f, 0.f, false);
  forward({9, 31}, 0, 7, 24, true, 1.f, 1.f, false);
  forward({9, 31}, 0, 7, 24, false, 1.f, 1.f, false);           // row-contiguous W with N % 8 != 0
  forward({50, 0, 3}, 1, 130, 20, false, 1.f, 0.f, false);      // same, big tiles, partial n tile
  forward({200}, 0, 64, 1000, true, 1.f, 0.f, false);           // one expert, long reduction
  // Weight gradients: LoRA B-like (K = r: skinny), A-like (N = r, K large), awkward sizes, empty experts.
  wgrad({0, 50, 7, 0, 90}, 72, 16, 0.5f, 1.f);
  wgrad({0, 50, 7, 0, 90}, 16, 136, 1.f, 1.f);
  wgrad({33, 0, 65}, 33, 130, 1.f, 0.f);
  // Rank-fitted tiles (r <= 16): gA-like 16 x 200 and r 8 / 1, gB-like 264 x 16 and r 8 / 1, ~128 rows an expert
  // (4 k-steps), beta 1 and 0 (C's old values read before the main loop on the i-major ring).
  wgrad({0, 128, 7, 0, 130}, 16, 200, 1.f, 1.f);
  wgrad({0, 128, 7, 0, 130}, 8, 136, 0.5f, 0.f);
  wgrad({40, 0, 90}, 1, 64, 1.f, 1.f);
  wgrad({0, 128, 7, 0, 130}, 264, 16, 0.25f, 1.f);
  wgrad({0, 128, 7, 0, 130}, 136, 8, 1.f, 0.f);
  wgrad({40, 0, 90}, 72, 1, 1.f, 1.f);
  // The fp32 FMA kernel (both operands F32): LoRA products and F32-compute backends.
  forward({0, 100, 0, 130, 33, 0}, 3, 40, 72, true, 1.f, 0.f, false, true);
  forward({70, 5, 129}, 0, 136, 16, false, 0.5f, 1.f, false, true);
  forward({12, 0, 140, 1}, 2, 16, 33, true, 1.f, 0.25f, true, true);
  forward({0, 100, 0, 130, 33, 0}, 3, 300, 16, true, 2.f, 1.f, false, true);   // LoRA up: u·B_eᵀ, K = r
  forward({70, 5, 129}, 0, 520, 8, false, 1.f, 1.f, false, true);             // du·A_e (W row-contiguous)
  wgrad({0, 50, 7, 0, 90}, 72, 16, 0.5f, 1.f, true);
  wgrad({33, 0, 65}, 33, 130, 1.f, 0.f, true);
  // Expert-sized: rows over several row tiles, long reductions (many ring turns), K not a multiple of kBK.
  forward({300, 0, 77, 129}, 0, 256, 520, true, 1.f, 0.f, false);
  forward({300, 0, 77, 129}, 0, 264, 200, false, 1.f, 1.f, false);
  wgrad({140, 0, 300}, 136, 264, 1.f, 0.f);
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
