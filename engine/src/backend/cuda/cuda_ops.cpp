// CudaBackend elementwise, norm, activation, RoPE, conv, gate, MoE and optimizer ops: shape checks, then
// one launcher call each (kernels/).
#include <cmath>
#include <string>

#include "backend/adamw_scalars.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "conv/conv.cuh"
#include "core/error.h"
#include "core/lazy_check.h"
#include "elementwise/elementwise.cuh"
#include "gdn/gdn.cuh"
#include "moe/moe.cuh"
#include "norm/norm.cuh"
#include "optim/optim.cuh"
#include "rope/rope.cuh"

namespace deltatune::cuda {

namespace {
void same_numel(const char* op, std::initializer_list<const Tensor*> ts) {
  const int64_t n = (*ts.begin())->numel();
  for (const Tensor* t : ts)
    check(t->numel() == n, [&] {
      return std::string(op) + ": tensors differ in size (" + shape_str((*ts.begin())->shape) + " vs " +
             shape_str(t->shape) + ")";
    });
}
void expect_dtype(const Tensor& t, DType d, const char* what) {
  check(t.dtype == d,
        [&] { return std::string(what) + " must be " + dtype_name(d) + ", got " + dtype_name(t.dtype); });
}
const int32_t* i32(const Tensor& t, const char* what) {
  expect_dtype(t, DType::I32, what);
  check(t.device == Device::CUDA || t.numel() == 0,
        [&] { return std::string(what) + " is not a CUDA tensor"; });
  return static_cast<const int32_t*>(t.data);
}
float* f32(Tensor& t, const char* what) {
  expect_dtype(t, DType::F32, what);
  return static_cast<float*>(t.data);
}
const float* f32c(const Tensor& t, const char* what) {
  expect_dtype(t, DType::F32, what);
  return static_cast<const float*>(t.data);
}
}  // namespace

void CudaBackend::add(Tensor& y, const Tensor& x, float alpha) {
  same_numel("add", {&y, &x});
  cuda_check(kernels::launch_add(kout(y, "add: y"), kin(x, "add: x"), alpha, y.numel(), stream()), "add");
}

void CudaBackend::scale(Tensor& y, float alpha) {
  cuda_check(kernels::launch_scale(kout(y, "scale: y"), alpha, y.numel(), stream()), "scale");
}

void CudaBackend::dropout(const Tensor& x, float p, uint64_t seed, Tensor& y) {
  same_numel("dropout", {&x, &y});
  check(p >= 0.f && p <= 1.f, [&] { return "dropout: p must be in [0, 1], got " + std::to_string(p); });
  cuda_check(kernels::launch_dropout(kin(x, "dropout: x"), p, seed, kout(y, "dropout: y"), x.numel(), stream()),
             "dropout");
}

void CudaBackend::embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) {
  const int64_t T = ids.numel(), H = table.cols();
  check(table.ndim() == 2 && out.numel() == T * H && out.cols() == H, [&] {
    return "embedding_fwd: table " + shape_str(table.shape) + ", ids " + shape_str(ids.shape) + ", out " +
           shape_str(out.shape) + " (expected out [T, H])";
  });
  cuda_check(kernels::launch_gather_rows(kin(table, "embedding_fwd: table"), table.rows(), i32(ids, "embedding ids"),
                                         T, H, kout(out, "embedding_fwd: out"), stream()),
             "embedding_fwd");
}

// ---- norms -----------------------------------------------------------------------------------------
void CudaBackend::rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, bool zc, Tensor& y, Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && y.numel() == x.numel() && rstd.numel() == rows, [&] {
    return "rmsnorm_fwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", y " +
           shape_str(y.shape) + ", rstd " + shape_str(rstd.shape);
  });
  cuda_check(kernels::launch_rmsnorm_fwd(kin(x, "rmsnorm x"), kin(w, "rmsnorm w"), eps, zc, kout(y, "rmsnorm y"),
                                         f32(rstd, "rmsnorm rstd"), rows, n, stream()),
             "rmsnorm_fwd");
}

void CudaBackend::rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, bool zc,
                              Tensor& dx) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && dy.numel() == x.numel() && dx.numel() == x.numel() &&
            rstd.numel() == rows,
        [&] {
          return "rmsnorm_bwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", rstd " +
                 shape_str(rstd.shape);
        });
  cuda_check(kernels::launch_rmsnorm_bwd(kin(dy, "rmsnorm dy"), kin(x, "rmsnorm x"), kin(w, "rmsnorm w"),
                                         f32c(rstd, "rmsnorm rstd"), zc, kout(dx, "rmsnorm dx"), rows, n, stream()),
             "rmsnorm_bwd");
}

namespace {
// A column block's checked geometry and typed pointers (its first column's address; rows t.cols() apart).
struct ColsView {
  int64_t rows, width, ld;
  void* p;
};
ColsView cols_view(const Backend::Cols& m, const std::string& what) {
  check(m.t.ndim() >= 1 && m.col >= 0 && m.width() > 0 && m.col + m.width() <= m.t.cols(), [&] {
    return what + ": columns [" + std::to_string(m.col) + ", " + std::to_string(m.col + m.width()) +
           ") are not inside " + shape_str(m.t.shape);
  });
  return {m.t.rows(), m.width(), m.t.cols(),
          static_cast<char*>(m.t.data) + m.col * static_cast<int64_t>(dtype_size(m.t.dtype))};
}
kernels::KIn kin_at(const Backend::Cols& m, const ColsView& v, const char* what) {
  kernels::KIn k = kin(m.t, what);
  k.p = v.p;
  return k;
}
kernels::KOut kout_at(const Backend::Cols& m, const ColsView& v, const char* what) {
  Tensor t = m.t;
  kernels::KOut k = kout(t, what);
  k.p = v.p;
  return k;
}
}  // namespace

// x (dx) read (written) in place: the row kernels take a row stride.
void CudaBackend::rmsnorm_fwd_cols(const Cols& x, const Tensor& w, float eps, bool zc, Tensor& y,
                                   Tensor& rstd) {
  const ColsView v = cols_view(x, "rmsnorm_fwd_cols x");
  const int64_t n = w.numel();
  check(v.width == n && y.numel() == v.rows * n && rstd.numel() == v.rows, [&] {
    return "rmsnorm_fwd_cols: x block " + std::to_string(v.rows) + "x" + std::to_string(v.width) + " of " +
           shape_str(x.t.shape) + ", w " + shape_str(w.shape) + ", y " + shape_str(y.shape) + ", rstd " +
           shape_str(rstd.shape);
  });
  cuda_check(
      kernels::launch_rmsnorm_fwd_ld(kin_at(x, v, "rmsnorm x"), v.ld, kin(w, "rmsnorm w"), eps, zc,
                                     kout(y, "rmsnorm y"), n, f32(rstd, "rmsnorm rstd"), v.rows, n, stream()),
      "rmsnorm_fwd_cols");
}

void CudaBackend::rmsnorm_bwd_cols(const Tensor& dy, const Cols& x, const Tensor& w, const Tensor& rstd,
                                   bool zc, const Cols& dx) {
  const ColsView v = cols_view(x, "rmsnorm_bwd_cols x"), d = cols_view(dx, "rmsnorm_bwd_cols dx");
  const int64_t n = w.numel();
  check(
      v.width == n && d.width == n && d.rows == v.rows && dy.numel() == v.rows * n && rstd.numel() == v.rows,
      [&] {
        return "rmsnorm_bwd_cols: x block " + std::to_string(v.rows) + "x" + std::to_string(v.width) +
               ", dx block " + std::to_string(d.rows) + "x" + std::to_string(d.width) + ", w " +
               shape_str(w.shape) + ", dy " + shape_str(dy.shape) + ", rstd " + shape_str(rstd.shape);
      });
  cuda_check(kernels::launch_rmsnorm_bwd_ld(kin(dy, "rmsnorm dy"), kin_at(x, v, "rmsnorm x"), v.ld,
                                            kin(w, "rmsnorm w"), f32c(rstd, "rmsnorm rstd"), zc,
                                            kout_at(dx, d, "rmsnorm dx"), d.ld, v.rows, n, stream()),
             "rmsnorm_bwd_cols");
}

void CudaBackend::rmsnorm_bwd_add(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, bool zc,
                                  const Tensor& residual, Tensor& dx) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && dy.numel() == x.numel() && dx.numel() == x.numel() &&
            residual.numel() == x.numel() && rstd.numel() == rows,
        [&] {
          return "rmsnorm_bwd_add: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", rstd " +
                 shape_str(rstd.shape) + ", residual " + shape_str(residual.shape);
        });
  const kernels::KIn res = kin(residual, "rmsnorm residual");
  const kernels::KOut out = kout(dx, "rmsnorm dx");
  if (!kernels::rmsnorm_bwd_add_fits(kin(dy, "rmsnorm dy"), kin(x, "rmsnorm x"), res, out, n)) {
    Backend::rmsnorm_bwd_add(dy, x, w, rstd, zc, residual, dx);
    return;
  }
  cuda_check(kernels::launch_rmsnorm_bwd_add(kin(dy, "rmsnorm dy"), kin(x, "rmsnorm x"), kin(w, "rmsnorm w"),
                                             f32c(rstd, "rmsnorm rstd"), zc, res, out, rows, n, stream()),
             "rmsnorm_bwd_add");
}

void CudaBackend::gated_rmsnorm_fwd(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y,
                                    Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && z.numel() == x.numel() && y.numel() == x.numel() &&
            rstd.numel() == rows,
        [&] {
          return "gated_rmsnorm_fwd: x " + shape_str(x.shape) + ", z " + shape_str(z.shape) + ", w " +
                 shape_str(w.shape);
        });
  cuda_check(kernels::launch_gated_rmsnorm_fwd(kin(x, "gated_rmsnorm x"), kin(z, "gated_rmsnorm z"),
                                               kin(w, "gated_rmsnorm w"), eps, kout(y, "gated_rmsnorm y"),
                                               f32(rstd, "gated_rmsnorm rstd"), rows, n, stream()),
             "gated_rmsnorm_fwd");
}

void CudaBackend::gated_rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w,
                                    const Tensor& rstd, Tensor& dx, Tensor& dz) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && z.numel() == x.numel() && dy.numel() == x.numel() &&
            dx.numel() == x.numel() && dz.numel() == x.numel() && rstd.numel() == rows,
        [&] { return "gated_rmsnorm_bwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape); });
  cuda_check(kernels::launch_gated_rmsnorm_bwd(kin(dy, "gated_rmsnorm dy"), kin(x, "gated_rmsnorm x"),
                                               kin(z, "gated_rmsnorm z"), kin(w, "gated_rmsnorm w"),
                                               f32c(rstd, "gated_rmsnorm rstd"), kout(dx, "gated_rmsnorm dx"),
                                               kout(dz, "gated_rmsnorm dz"), rows, n, stream()),
             "gated_rmsnorm_bwd");
}

// ---- activations ---------------------------------------------------------------------------------------
void CudaBackend::swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) {
  same_numel("swiglu_fwd", {&gate, &up, &out});
  cuda_check(kernels::launch_swiglu_fwd(kin(gate, "swiglu gate"), kin(up, "swiglu up"), kout(out, "swiglu out"),
                                        gate.numel(), stream()),
             "swiglu_fwd");
}
void CudaBackend::swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  same_numel("swiglu_bwd", {&dout, &gate, &up, &dgate, &dup});
  cuda_check(kernels::launch_swiglu_bwd(kin(dout, "swiglu dout"), kin(gate, "swiglu gate"), kin(up, "swiglu up"),
                                        kout(dgate, "swiglu dgate"), kout(dup, "swiglu dup"), gate.numel(), stream()),
             "swiglu_bwd");
}
void CudaBackend::sigmoid_mul_fwd(const Tensor& x, const Tensor& gate, Tensor& out) {
  same_numel("sigmoid_mul_fwd", {&x, &gate, &out});
  cuda_check(kernels::launch_sigmoid_mul_fwd(kin(x, "sigmoid_mul x"), kin(gate, "sigmoid_mul gate"),
                                             kout(out, "sigmoid_mul out"), x.numel(), stream()),
             "sigmoid_mul_fwd");
}
void CudaBackend::sigmoid_mul_bwd(const Tensor& dout, const Tensor& x, const Tensor& gate, Tensor& dx,
                                  Tensor& dgate) {
  same_numel("sigmoid_mul_bwd", {&dout, &x, &gate, &dx, &dgate});
  cuda_check(kernels::launch_sigmoid_mul_bwd(kin(dout, "sigmoid_mul dout"), kin(x, "sigmoid_mul x"),
                                             kin(gate, "sigmoid_mul gate"), kout(dx, "sigmoid_mul dx"),
                                             kout(dgate, "sigmoid_mul dgate"), x.numel(), stream()),
             "sigmoid_mul_bwd");
}
// The gate read (its gradient written) in place when every operand is bf16 on 16-byte pieces; else the
// default's copies.
void CudaBackend::sigmoid_mul_fwd_cols(const Tensor& x, const Cols& gate, Tensor& out) {
  const ColsView g = cols_view(gate, "sigmoid_mul_fwd_cols gate");
  check(x.numel() == g.rows * g.width && out.numel() == x.numel(), [&] {
    return "sigmoid_mul_fwd_cols: x " + shape_str(x.shape) + ", out " + shape_str(out.shape) +
           " and the gate block " + std::to_string(g.rows) + "x" + std::to_string(g.width) +
           " differ in size";
  });
  const kernels::KIn xi = kin(x, "sigmoid_mul x"), gi = kin_at(gate, g, "sigmoid_mul gate");
  const kernels::KOut o = kout(out, "sigmoid_mul out");
  if (!kernels::sigmoid_mul_cols_fits({xi, gi, kernels::KIn{o.p, o.t}}, g.width, g.ld)) {
    Backend::sigmoid_mul_fwd_cols(x, gate, out);
    return;
  }
  cuda_check(kernels::launch_sigmoid_mul_fwd_cols(xi, gi, g.ld, o, g.rows, g.width, stream()),
             "sigmoid_mul_fwd_cols");
}
void CudaBackend::sigmoid_mul_bwd_cols(const Tensor& dout, const Tensor& x, const Cols& gate, Tensor& dx,
                                       const Cols& dgate) {
  const ColsView g = cols_view(gate, "sigmoid_mul_bwd_cols gate"),
                 dg = cols_view(dgate, "sigmoid_mul_bwd_cols dgate");
  check(x.numel() == g.rows * g.width && dout.numel() == x.numel() && dx.numel() == x.numel() &&
            dg.rows == g.rows && dg.width == g.width,
        [&] {
          return "sigmoid_mul_bwd_cols: x " + shape_str(x.shape) + ", dout " + shape_str(dout.shape) +
                 ", dx " + shape_str(dx.shape) + ", gate block " + std::to_string(g.rows) + "x" +
                 std::to_string(g.width) + ", dgate block " + std::to_string(dg.rows) + "x" +
                 std::to_string(dg.width) + " differ in size";
        });
  const kernels::KIn di = kin(dout, "sigmoid_mul dout"), xi = kin(x, "sigmoid_mul x"),
                     gi = kin_at(gate, g, "sigmoid_mul gate");
  const kernels::KOut dxo = kout(dx, "sigmoid_mul dx"), dgo = kout_at(dgate, dg, "sigmoid_mul dgate");
  if (dg.ld != g.ld ||
      !kernels::sigmoid_mul_cols_fits({di, xi, gi, kernels::KIn{dxo.p, dxo.t}, kernels::KIn{dgo.p, dgo.t}},
                                      g.width, g.ld)) {
    Backend::sigmoid_mul_bwd_cols(dout, x, gate, dx, dgate);
    return;
  }
  cuda_check(kernels::launch_sigmoid_mul_bwd_cols(di, xi, gi, g.ld, dxo, dgo, g.rows, g.width, stream()),
             "sigmoid_mul_bwd_cols");
}
void CudaBackend::sigmoid(const Tensor& x, Tensor& y) {
  same_numel("sigmoid", {&x, &y});
  cuda_check(kernels::launch_sigmoid(kin(x, "sigmoid x"), kout(y, "sigmoid y"), x.numel(), stream()), "sigmoid");
}

// ---- RoPE ---------------------------------------------------------------------------------------------
void CudaBackend::rope(Tensor& x, const Tensor& positions, int rot_dim, float theta, bool inverse) {
  check(x.ndim() == 3 && positions.numel() == x.dim(0) && rot_dim > 0 && rot_dim % 2 == 0 &&
            rot_dim <= x.dim(2),
        [&] {
          return "rope: x must be [T, heads, head_dim] with positions [T] and an even rot_dim <= head_dim; "
                 "got x " +
                 shape_str(x.shape) + ", positions " + shape_str(positions.shape) + ", rot_dim " +
                 std::to_string(rot_dim);
        });
  cuda_check(kernels::launch_rope(kout(x, "rope x"), i32(positions, "rope positions"), x.dim(0), x.dim(1), x.dim(2),
                                  rot_dim, theta, inverse, stream()),
             "rope");
}
void CudaBackend::rope_multimodal(Tensor& x, const Tensor& positions, int rot_dim, float theta,
                                  const std::array<int64_t, 3>& section, bool inverse) {
  check(x.ndim() == 3 && positions.ndim() == 2 && positions.dim(0) == 3 && positions.dim(1) == x.dim(0) &&
            rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= x.dim(2),
        [&] {
          return "rope_multimodal: x must be [T, heads, head_dim] with positions [3, T] and an even rot_dim "
                 "<= head_dim; "
                 "got x " +
                 shape_str(x.shape) + ", positions " + shape_str(positions.shape) + ", rot_dim " +
                 std::to_string(rot_dim);
        });
  cuda_check(kernels::launch_rope_multimodal(kout(x, "rope x"), i32(positions, "rope positions"), x.dim(0), x.dim(1),
                                             x.dim(2), rot_dim, theta, static_cast<int>(section[1]),
                                             static_cast<int>(section[2]), inverse, stream()),
             "rope_multimodal");
}

// ---- GDN pre/post ops ------------------------------------------------------------------------------------
namespace {
// The column parts of a conv output / gradient (rows T, ≤ kMaxColParts parts covering C columns) for the
// kernels.
template <class K, class Parts, class Ptr>
kernels::ColParts<K> conv_parts(const char* op, int64_t T, int64_t C, const Parts& parts, Ptr ptr) {
  static_assert(Backend::kMaxColumnParts == kernels::kMaxColParts, "one bound on the parts");
  Backend::check_column_parts(op, T, C, std::vector<const Tensor*>(parts.begin(), parts.end()));
  kernels::ColParts<K> r;
  int64_t end = 0;
  for (auto* p : parts) {
    end += p->cols();
    r.part[r.n] = ptr(*p);
    r.end[r.n++] = end;
  }
  return r;
}
}  // namespace

void CudaBackend::conv1d_silu_fwd(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& y) {
  check(y.numel() == x.numel(),
        [&] { return "conv1d_silu_fwd: y " + shape_str(y.shape) + " for x " + shape_str(x.shape); });
  Tensor yv = y.view({x.rows(), x.cols()});
  Tensor* parts[] = {&yv};
  conv1d_silu_fwd_split(x, w, seq, parts);
}

void CudaBackend::conv1d_silu_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const SeqLayout& seq,
                                  Tensor& dx) {
  check(dy.numel() == x.numel(),
        [&] { return "conv1d_silu_bwd: dy " + shape_str(dy.shape) + " for x " + shape_str(x.shape); });
  const Tensor dyv = dy.view({x.rows(), x.cols()});
  const Tensor* parts[] = {&dyv};
  conv1d_silu_bwd_split(parts, x, w, seq, dx);
}

void CudaBackend::conv1d_silu_fwd_split(const Tensor& x, const Tensor& w, const SeqLayout& seq,
                                        std::span<Tensor* const> ys) {
  const int64_t T = x.rows(), C = x.cols();
  check(w.ndim() == 2 && w.dim(0) == C, [&] {
    return "conv1d_silu_fwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + " (expected [C, K])";
  });
  check_layout(seq, T, "conv1d_silu_fwd");
  const auto y =
      conv_parts<kernels::KOut>("conv1d_silu_fwd", T, C, ys, [](Tensor& t) { return kout(t, "conv y"); });
  cuda_check(kernels::launch_conv1d_silu_fwd(
                 kin(x, "conv x"), kin(w, "conv w"), i32(seq.cu_seqlens, "cu_seqlens"),
                 static_cast<int>(seq.num_seqs()), y, T, C, static_cast<int>(w.dim(1)), stream()),
             "conv1d_silu_fwd");
}

void CudaBackend::conv1d_silu_bwd_split(std::span<const Tensor* const> dys, const Tensor& x, const Tensor& w,
                                        const SeqLayout& seq, Tensor& dx) {
  const int64_t T = x.rows(), C = x.cols();
  check(w.ndim() == 2 && w.dim(0) == C && dx.numel() == x.numel(), [&] {
    return "conv1d_silu_bwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", dx " +
           shape_str(dx.shape);
  });
  check_layout(seq, T, "conv1d_silu_bwd");
  const auto dy = conv_parts<kernels::KIn>("conv1d_silu_bwd", T, C, dys,
                                           [](const Tensor& t) { return kin(t, "conv dy"); });
  cuda_check(
      kernels::launch_conv1d_silu_bwd(dy, kin(x, "conv x"), kin(w, "conv w"),
                                      i32(seq.cu_seqlens, "cu_seqlens"), static_cast<int>(seq.num_seqs()),
                                      kout(dx, "conv dx"), T, C, static_cast<int>(w.dim(1)), stream()),
      "conv1d_silu_bwd");
}

void CudaBackend::gdn_gates_fwd(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                                Tensor& g, Tensor& beta) {
  const int64_t HV = A_log.numel(), T = HV ? a.numel() / HV : 0;
  check(HV > 0 && a.numel() == T * HV && b.numel() == a.numel() && dt_bias.numel() == HV &&
            g.numel() == a.numel() && beta.numel() == a.numel(),
        [&] { return "gdn_gates_fwd: a " + shape_str(a.shape) + ", A_log " + shape_str(A_log.shape); });
  cuda_check(kernels::launch_gdn_gates_fwd(kin(a, "gates a"), kin(b, "gates b"), kin(A_log, "A_log"),
                                           kin(dt_bias, "dt_bias"), f32(g, "gates g"), kout(beta, "gates beta"), T, HV,
                                           stream()),
             "gdn_gates_fwd");
}

void CudaBackend::gdn_gates_bwd(const Tensor& dg, const Tensor& dbeta, const Tensor& a, const Tensor& b,
                                const Tensor& A_log, const Tensor& dt_bias, Tensor& da, Tensor& db) {
  const int64_t HV = A_log.numel(), T = HV ? a.numel() / HV : 0;
  same_numel("gdn_gates_bwd", {&dg, &dbeta, &a, &b, &da, &db});
  check(HV > 0 && a.numel() == T * HV && dt_bias.numel() == HV,
        [&] { return "gdn_gates_bwd: a " + shape_str(a.shape); });
  cuda_check(kernels::launch_gdn_gates_bwd(kin(dg, "gates dg"), kin(dbeta, "gates dbeta"), kin(a, "gates a"),
                                           kin(b, "gates b"), kin(A_log, "A_log"), kin(dt_bias, "dt_bias"),
                                           kout(da, "gates da"), kout(db, "gates db"), T, HV, stream()),
             "gdn_gates_bwd");
}

// ---- MoE ----------------------------------------------------------------------------------------------
void CudaBackend::moe_router_fwd(const Tensor& logits, int k, Tensor& idx, Tensor& w) {
  const int64_t T = logits.rows(), E = logits.cols();
  check(k > 0 && k <= E && k <= 64 && idx.numel() == T * k && w.numel() == T * k, [&] {
    return "moe_router_fwd: logits " + shape_str(logits.shape) + ", k " + std::to_string(k) +
           " (k <= 64), idx " + shape_str(idx.shape) + ", w " + shape_str(w.shape);
  });
  check(E * 4 <= 48 * 1024,
        [&] { return "moe_router_fwd: too many experts (" + std::to_string(E) + ", at most 12288)"; });
  expect_dtype(idx, DType::I32, "moe_router_fwd idx");
  cuda_check(kernels::launch_moe_router_fwd(policy_, kin(logits, "router logits"), T, static_cast<int>(E), k,
                                            static_cast<int32_t*>(idx.data), f32(w, "router w"), stream()),
             "moe_router_fwd");
}

void CudaBackend::moe_router_bwd(const Tensor& dw, const Tensor& idx, const Tensor& w, Tensor& dlogits) {
  const int64_t T = dlogits.rows(), E = dlogits.cols(), k = T ? idx.numel() / T : 0;
  check(idx.numel() == T * k && w.numel() == T * k && dw.numel() == T * k, [&] {
    return "moe_router_bwd: dlogits " + shape_str(dlogits.shape) + ", idx " + shape_str(idx.shape);
  });
  cuda_check(kernels::launch_moe_router_bwd(f32c(dw, "router dw"), i32(idx, "router idx"), f32c(w, "router w"), T,
                                            static_cast<int>(E), static_cast<int>(k), kout(dlogits, "router dlogits"),
                                            stream()),
             "moe_router_bwd");
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  const int64_t n = rows.numel(), H = src.cols();
  check(dst.numel() == n * H && dst.cols() == H, [&] {
    return "gather_rows: src " + shape_str(src.shape) + ", rows " + shape_str(rows.shape) + ", dst " +
           shape_str(dst.shape);
  });
  cuda_check(kernels::launch_gather_rows(kin(src, "gather src"), src.rows(), i32(rows, "gather rows"), n, H,
                                         kout(dst, "gather dst"), stream()),
             "gather_rows");
}

void CudaBackend::scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor& scale, Tensor& dst) {
  const int64_t n = rows.numel(), H = dst.cols();
  check(src.numel() == n * H && (!scale.defined() || scale.numel() == n), [&] {
    return "scatter_add_rows: src " + shape_str(src.shape) + ", rows " + shape_str(rows.shape) + ", dst " +
           shape_str(dst.shape);
  });
  const float* sc = scale.defined() ? f32c(scale, "scatter_add scale") : nullptr;
  cuda_check(kernels::launch_scatter_add_rows(kin(src, "scatter src"), i32(rows, "scatter rows"), sc, n, H,
                                              kout(dst, "scatter dst"), dst.rows(), stream()),
             "scatter_add_rows");
}

void CudaBackend::row_dot(const Tensor& a, const Tensor& b, Tensor& out) {
  same_numel("row_dot", {&a, &b});
  check(out.numel() == a.rows(),
        [&] { return "row_dot: out " + shape_str(out.shape) + " for a " + shape_str(a.shape); });
  cuda_check(kernels::launch_row_dot(kin(a, "row_dot a"), kin(b, "row_dot b"), a.rows(), a.cols(),
                                     f32(out, "row_dot out"), stream()),
             "row_dot");
}

void CudaBackend::scale_rows(const Tensor& x, const Tensor& s, Tensor& y) {
  same_numel("scale_rows", {&x, &y});
  check(s.numel() == x.rows(),
        [&] { return "scale_rows: s " + shape_str(s.shape) + " for x " + shape_str(x.shape); });
  cuda_check(kernels::launch_scale_rows(kin(x, "scale_rows x"), f32c(s, "scale_rows s"), x.rows(), x.cols(),
                                        kout(y, "scale_rows y"), stream()),
             "scale_rows");
}

// ---- optimizers -------------------------------------------------------------------------------------------
void CudaBackend::adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int64_t step) {
  same_numel("adamw_step", {&param, &grad, &m, &v});
  check(step >= 1, "adamw_step: step counts from 1");
  const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  cuda_check(kernels::launch_adamw(f32(param, "adamw param"), kin(grad, "adamw grad"), f32(m, "adamw m"),
                                   f32(v, "adamw v"), param.numel(), sc.decay, sc.weight_decay, sc.lerp_w, sc.b2,
                                   sc.one_minus_b2, sc.neg_step_size, sc.bc2_sqrt, sc.eps, stream()),
             "adamw_step");
}

void CudaBackend::adamw_step_many(const std::vector<AdamWSlot>& slots, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, int64_t step, float grad_scale) {
  check(step >= 1, "adamw_step: step counts from 1");
  std::vector<float*> p, m, v;
  std::vector<const float*> g;
  std::vector<int64_t> n;
  for (const AdamWSlot& s : slots) {
    same_numel("adamw_step", {s.param, s.grad, s.m, s.v});
    if (s.grad->dtype != DType::F32) {  // the multi-tensor kernel reads F32 gradients only
      Backend::adamw_step_many({s}, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
      continue;
    }
    p.push_back(f32(*s.param, "adamw param"));
    g.push_back(f32c(*s.grad, "adamw grad"));
    m.push_back(f32(*s.m, "adamw m"));
    v.push_back(f32(*s.v, "adamw v"));
    n.push_back(s.param->numel());
  }
  const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  cuda_check(kernels::launch_adamw_many(p.data(), g.data(), m.data(), v.data(), n.data(), static_cast<int>(p.size()),
                                        grad_scale, sc.decay, sc.weight_decay, sc.lerp_w, sc.b2, sc.one_minus_b2,
                                        sc.neg_step_size, sc.bc2_sqrt, sc.eps, stream()),
             "adamw_step_many");
}

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, float lr, float weight_decay) {
  same_numel("sgd_step", {&param, &grad});
  cuda_check(kernels::launch_sgd(f32(param, "sgd param"), kin(grad, "sgd grad"), param.numel(), lr, weight_decay,
                                 stream()),
             "sgd_step");
}

}  // namespace deltatune::cuda
