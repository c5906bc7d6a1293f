// MoE dispatch (stable counting sort of the routing slots by expert), the weighted combine back to
// tokens, grouped expert GEMMs over device-side row ranges, and the 3-D permutation used to regroup
// expert LoRA B. Plain loops: this is the reference the CUDA kernels are tested against.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {

// Host copy of the offsets, validated: non-decreasing from 0, at most `rows`.
std::vector<int32_t> checked_offsets(const Tensor& offsets, int64_t E, int64_t rows, const char* op) {
  check(offsets.numel() == E + 1, std::string("cpu backend: ") + op + ": offsets " + shape_str(offsets.shape) +
                                      " must have E+1 = " + std::to_string(E + 1) + " entries");
  const int32_t* p = cpu::i32(offsets, op);
  std::vector<int32_t> off(p, p + E + 1);
  check(off[0] == 0 && off[E] <= rows, std::string("cpu backend: ") + op + ": offsets must start at 0 and end at <= " +
                                           std::to_string(rows) + " rows, got [" + std::to_string(off[0]) + ", " +
                                           std::to_string(off[E]) + "]");
  for (int64_t e = 0; e < E; ++e)
    check(off[e + 1] >= off[e], std::string("cpu backend: ") + op + ": offsets decrease at expert " + std::to_string(e));
  return off;
}

}  // namespace

void CpuBackend::moe_dispatch(const Tensor& idx, int num_experts, Tensor& offsets, Tensor& row_token,
                              Tensor& row_slot, Tensor& slot_row, Tensor* load) {
  const int64_t E = num_experts, n = idx.numel();
  const int64_t K = idx.ndim() == 2 ? idx.cols() : 1;
  check(E >= 1, "cpu backend: moe_dispatch needs at least one expert");
  cpu::check_numel(offsets, E + 1, "moe_dispatch offsets");
  cpu::check_numel(row_token, n, "moe_dispatch row_token");
  cpu::check_numel(row_slot, n, "moe_dispatch row_slot");
  cpu::check_numel(slot_row, n, "moe_dispatch slot_row");
  const int32_t* pi = cpu::i32(idx, "moe_dispatch idx");
  int32_t* po = cpu::i32(offsets, "moe_dispatch offsets");
  int32_t* pt = cpu::i32(row_token, "moe_dispatch row_token");
  int32_t* ps = cpu::i32(row_slot, "moe_dispatch row_slot");
  int32_t* pr = cpu::i32(slot_row, "moe_dispatch slot_row");
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  for (int64_t s = 0; s < n; ++s) {
    check(pi[s] >= 0 && pi[s] < E, "cpu backend: moe_dispatch expert index " + std::to_string(pi[s]) +
                                       " at slot " + std::to_string(s) + " outside [0, " + std::to_string(E) + ")");
    ++count[pi[s]];
  }
  po[0] = 0;
  for (int64_t e = 0; e < E; ++e) po[e + 1] = static_cast<int32_t>(po[e] + count[e]);
  std::vector<int64_t> next(po, po + E);
  for (int64_t s = 0; s < n; ++s) {  // increasing s: stable within each expert
    const int64_t r = next[pi[s]]++;
    pt[r] = static_cast<int32_t>(s / K);
    ps[r] = static_cast<int32_t>(s);
    pr[s] = static_cast<int32_t>(r);
  }
  if (load) {
    cpu::check_numel(*load, E, "moe_dispatch load");
    float* pl = cpu::f32(*load, "moe_dispatch load");
    for (int64_t e = 0; e < E; ++e) pl[e] += static_cast<float>(count[e]);
  }
}

void CpuBackend::moe_combine(const Tensor& y, const Tensor& slot_row, const Tensor& w, Tensor& out) {
  const int64_t T = out.rows(), H = out.cols(), n = slot_row.numel();
  check(T > 0 && n % T == 0, "cpu backend: moe_combine slot_row " + shape_str(slot_row.shape) +
                                 " is not a multiple of the " + std::to_string(T) + " output rows");
  const int64_t K = n / T, M = y.rows();
  check(y.cols() == H, "cpu backend: moe_combine y " + shape_str(y.shape) + " vs out " + shape_str(out.shape));
  const float* py = cpu::f32(y, "moe_combine y");
  const int32_t* pr = cpu::i32(slot_row, "moe_combine slot_row");
  const float* pw = nullptr;
  if (w.defined()) {
    cpu::check_numel(w, n, "moe_combine w");
    pw = cpu::f32(w, "moe_combine w");
  }
  float* po = cpu::f32(out, "moe_combine out");
  for (int64_t s = 0; s < n; ++s)
    check(pr[s] >= 0 && pr[s] < M, "cpu backend: moe_combine slot_row[" + std::to_string(s) + "] = " +
                                       std::to_string(pr[s]) + " outside y's " + std::to_string(M) + " rows");
  pool_.parallel_for(T, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, H)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = po + t * H;
      std::fill(o, o + H, 0.f);
      for (int64_t j = 0; j < K; ++j) {
        const float wt = pw ? pw[t * K + j] : 1.f;
        const float* src = py + int64_t(pr[t * K + j]) * H;
        for (int64_t c = 0; c < H; ++c) o[c] += wt * src[c];
      }
    }
  });
}

void CpuBackend::grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, Tensor& y,
                              float alpha, float beta) {
  check(w.ndim() == 3, "cpu backend: grouped_gemm w must be 3-D [E, ., .], got " + shape_str(w.shape));
  const int64_t E = w.dim(0), M = x.rows(), K = x.cols();
  const int64_t Kw = trans_w ? w.dim(2) : w.dim(1), N = trans_w ? w.dim(1) : w.dim(2);
  check(Kw == K && y.rows() == M && y.cols() == N,
        "cpu backend: grouped_gemm shapes do not match: x " + shape_str(x.shape) + " · w " + shape_str(w.shape) +
            (trans_w ? "ᵀ" : "") + " -> y " + shape_str(y.shape));
  const std::vector<int32_t> off = checked_offsets(offsets, E, M, "grouped_gemm");
  cpu::f32(y, "grouped_gemm y");
  cpu::f32(x, "grouped_gemm x");
  cpu::f32(w, "grouped_gemm w");
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = off[e], r1 = off[e + 1];
    if (r1 == r0) continue;
    // beta == 0 must ignore old content (NaN included): gemm guarantees it for its own C.
    Tensor xe = x.slice(r0, r1), ye = y.slice(r0, r1);
    gemm(xe, false, w.index(e), trans_w, ye, alpha, beta);
  }
}

void CpuBackend::grouped_gemm_wgrad(const Tensor& a, const Tensor& b, const Tensor& offsets, Tensor& g, float alpha,
                                    float beta) {
  check(g.ndim() == 3, "cpu backend: grouped_gemm_wgrad g must be 3-D [E, N, K], got " + shape_str(g.shape));
  const int64_t E = g.dim(0), N = g.dim(1), K = g.dim(2), M = a.rows();
  check(a.cols() == N && b.cols() == K && b.rows() == M,
        "cpu backend: grouped_gemm_wgrad shapes do not match: a " + shape_str(a.shape) + ", b " + shape_str(b.shape) +
            " -> g " + shape_str(g.shape));
  const std::vector<int32_t> off = checked_offsets(offsets, E, M, "grouped_gemm_wgrad");
  cpu::f32(a, "grouped_gemm_wgrad a");
  cpu::f32(b, "grouped_gemm_wgrad b");
  cpu::f32(g, "grouped_gemm_wgrad g");
  for (int64_t e = 0; e < E; ++e) {
    Tensor ge = g.index(e);
    gemm(a.slice(off[e], off[e + 1]), true, b.slice(off[e], off[e + 1]), false, ge, alpha, beta);
  }
}

void CpuBackend::permute3(const Tensor& src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2,
                          Tensor& dst) {
  const int p[3] = {p0, p1, p2};
  check(p0 != p1 && p1 != p2 && p0 != p2 && p0 >= 0 && p0 < 3 && p1 >= 0 && p1 < 3 && p2 >= 0 && p2 < 3,
        "cpu backend: permute3 needs a permutation of (0, 1, 2)");
  cpu::check_numel(src, d0 * d1 * d2, "permute3 src");
  cpu::check_numel(dst, d0 * d1 * d2, "permute3 dst");
  const float* ps = cpu::f32(src, "permute3 src");
  float* pd = cpu::f32(dst, "permute3 dst");
  const int64_t d[3] = {d0, d1, d2};
  const int64_t sstride[3] = {d1 * d2, d2, 1};
  const int64_t o1 = d[p[1]], o2 = d[p[2]];
  for (int64_t i0 = 0; i0 < d[p[0]]; ++i0)
    for (int64_t i1 = 0; i1 < o1; ++i1)
      for (int64_t i2 = 0; i2 < o2; ++i2)
        pd[(i0 * o1 + i1) * o2 + i2] = ps[i0 * sstride[p[0]] + i1 * sstride[p[1]] + i2 * sstride[p[2]]];
}

}  // namespace deltatune
