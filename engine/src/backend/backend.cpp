#include "backend/backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/lazy_check.h"

namespace deltatune {

Tensor Backend::zeros(Shape shape, DType dtype) {
  Tensor t = alloc(std::move(shape), dtype);
  fill(t, 0.f);
  return t;
}

Tensor Backend::upload_i32(const std::vector<int32_t>& values) {
  Tensor h = host_tensor({static_cast<int64_t>(values.size())}, DType::I32);
  std::copy(values.begin(), values.end(), h.ptr<int32_t>());
  return upload(h, DType::I32);
}

void Backend::gemm_cols(const Cols& a, bool trans_a, const Cols& b, bool trans_b, const Cols& c, float alpha,
                        float beta) {
  auto whole = [&](const Cols& m, const char* what) {
    check(m.t.ndim() == 2 && m.col >= 0 && m.width() >= 0 && m.col + m.width() <= m.t.cols(), [&] {
      return std::string("gemm_cols: ") + what + " columns [" + std::to_string(m.col) + ", " +
             std::to_string(m.col + m.width()) + ") are not inside the 2-D tensor " + shape_str(m.t.shape);
    });
    if (m.col == 0 && m.width() == m.t.cols()) return m.t;
    Tensor t = alloc({m.t.rows(), m.width()}, m.t.dtype);
    copy_cols(t, 0, m.t, m.col, m.width());
    return t;
  };
  const Tensor A = whole(a, "A"), B = whole(b, "B");
  Tensor C = whole(c, "C");
  gemm(A, trans_a, B, trans_b, C, alpha, beta);
  if (C.data != c.t.data) {
    Tensor dst = c.t;
    copy_cols(dst, c.col, C, 0, c.width());
  }
}

namespace {
// The column block as a tensor of its own: the whole tensor when the block is all of it, else a copy.
Tensor cols_tensor(Backend& be, const Backend::Cols& m, const std::string& what) {
  check(m.t.ndim() >= 1 && m.col >= 0 && m.width() > 0 && m.col + m.width() <= m.t.cols(), [&] {
    return what + ": columns [" + std::to_string(m.col) + ", " + std::to_string(m.col + m.width()) +
           ") are not inside " + shape_str(m.t.shape);
  });
  if (m.col == 0 && m.width() == m.t.cols()) return m.t.view({m.t.rows(), m.t.cols()});
  Tensor t = be.alloc({m.t.rows(), m.width()}, m.t.dtype);
  be.copy_cols(t, 0, m.t.view({m.t.rows(), m.t.cols()}), m.col, m.width());
  return t;
}
// Writes src [rows, width] into the column block (nothing when src is the block's own tensor).
void to_cols(Backend& be, const Tensor& src, const Backend::Cols& m) {
  if (src.data == m.t.data && m.col == 0 && m.width() == m.t.cols()) return;
  Tensor dst = m.t.view({m.t.rows(), m.t.cols()});
  be.copy_cols(dst, m.col, src, 0, m.width());
}
}  // namespace

void Backend::rmsnorm_fwd_cols(const Cols& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                               Tensor& rstd) {
  rmsnorm_fwd(cols_tensor(*this, x, "rmsnorm_fwd_cols x"), w, eps, zero_centred, y, rstd);
}

void Backend::rmsnorm_bwd_cols(const Tensor& dy, const Cols& x, const Tensor& w, const Tensor& rstd,
                               bool zero_centred, const Cols& dx) {
  Tensor d = cols_tensor(*this, dx, "rmsnorm_bwd_cols dx");
  rmsnorm_bwd(dy, cols_tensor(*this, x, "rmsnorm_bwd_cols x"), w, rstd, zero_centred, d);
  to_cols(*this, d, dx);
}

// The gate block copied as a tensor of x's shape (the elementwise ops take operands of one shape).
void Backend::sigmoid_mul_fwd_cols(const Tensor& x, const Cols& gate, Tensor& out) {
  const Tensor g = cols_tensor(*this, gate, "sigmoid_mul_fwd_cols gate");
  check(g.numel() == x.numel(), [&] {
    return "sigmoid_mul_fwd_cols: gate block " + shape_str(g.shape) + " is not x " + shape_str(x.shape) +
           " in size";
  });
  sigmoid_mul_fwd(x, g.view(x.shape), out);
}

void Backend::sigmoid_mul_bwd_cols(const Tensor& dout, const Tensor& x, const Cols& gate, Tensor& dx,
                                   const Cols& dgate) {
  const Tensor g = cols_tensor(*this, gate, "sigmoid_mul_bwd_cols gate");
  const Tensor dg = cols_tensor(*this, dgate, "sigmoid_mul_bwd_cols dgate");
  check(g.numel() == x.numel() && dg.numel() == x.numel(), [&] {
    return "sigmoid_mul_bwd_cols: gate block " + shape_str(g.shape) + " / dgate block " +
           shape_str(dg.shape) + " is not x " + shape_str(x.shape) + " in size";
  });
  Tensor dgx = dg.view(x.shape);
  sigmoid_mul_bwd(dout, x, g.view(x.shape), dx, dgx);
  to_cols(*this, dg, dgate);
}

void Backend::lora_dy_products(const Tensor& dy, const Tensor& B, const Cols& u, float alpha, const Cols& du,
                               Tensor& gB) {
  gemm_cols(dy, true, u, false, gB, alpha, 1.f);
  gemm_cols(dy, false, B, false, du, alpha, 0.f);
}

void Backend::lora_up(const Cols& u, const Tensor& B, float alpha, const Tensor* residual, Tensor& y) {
  Tensor y2 = y.view({y.rows(), y.cols()});
  if (residual && residual->data != y.data) copy(y2, *residual);
  gemm_cols(u, false, B, true, y2, alpha, residual ? 1.f : 0.f);
}

bool Backend::lora_swiglu_fwd(const Cols& ug, const Tensor& Bg, float ag, const Cols& uu, const Tensor& Bu, float au,
                              Tensor& g, Tensor& u, Tensor& h, bool) {
  lora_up(ug, Bg, ag, &g, g);
  lora_up(uu, Bu, au, &u, u);
  swiglu_fwd(g, u, h);
  return true;
}

void Backend::lora_swiglu_bwd(Tensor& dh, const Tensor& dr, const Tensor& A, const Tensor& g, const Tensor& u,
                              Tensor& dg, Tensor& du, const GateUpTerms* terms) {
  if (dr.defined()) {
    Tensor dh2 = dh.view({dh.rows(), dh.cols()});
    gemm(dr, false, A, false, dh2, 1.f, 1.f);
  }
  if (!terms) {
    swiglu_bwd(dh, g, u, dg, du);
    return;
  }
  Tensor gs = alloc(g.shape, g.dtype), us = alloc(u.shape, u.dtype);
  lora_up(terms->ug, terms->Bg, terms->ag, &g, gs);
  lora_up(terms->uu, terms->Bu, terms->au, &u, us);
  swiglu_bwd(dh, gs, us, dg, du);
}

void Backend::check_column_parts(const char* op, int64_t T, int64_t C, std::span<const Tensor* const> parts) {
  int64_t cols = 0;
  for (const Tensor* p : parts) {
    check(p && p->ndim() == 2 && p->rows() == T && p->cols() > 0, [&] {
      return std::string(op) + ": every part must be a [T, C_i] tensor with T = " + std::to_string(T) +
             " rows and C_i > 0" + (p ? ", got " + shape_str(p->shape) : std::string(", got none"));
    });
    cols += p->cols();
  }
  check(!parts.empty() && parts.size() <= size_t(kMaxColumnParts) && cols == C, [&] {
    return std::string(op) + ": " + std::to_string(parts.size()) + " parts of " + std::to_string(cols) +
           " columns in all for " + std::to_string(C) + " channels (expected 1-" +
           std::to_string(kMaxColumnParts) + " parts covering every channel)";
  });
}

void Backend::conv1d_silu_fwd_split(const Tensor& x, const Tensor& w, const SeqLayout& seq,
                                    std::span<Tensor* const> ys) {
  check_column_parts("conv1d_silu_fwd_split", x.rows(), x.cols(), std::vector<const Tensor*>(ys.begin(), ys.end()));
  Tensor y = alloc(x.shape, ys.front()->dtype);
  conv1d_silu_fwd(x, w, seq, y);
  int64_t c0 = 0;
  for (Tensor* p : ys) {
    copy_cols(*p, 0, y, c0, p->cols());
    c0 += p->cols();
  }
}

void Backend::conv1d_silu_bwd_split(std::span<const Tensor* const> dys, const Tensor& x, const Tensor& w,
                                    const SeqLayout& seq, Tensor& dx) {
  check_column_parts("conv1d_silu_bwd_split", x.rows(), x.cols(), dys);
  Tensor dy = alloc(x.shape, dys.front()->dtype);
  int64_t c0 = 0;
  for (const Tensor* p : dys) {
    copy_cols(dy, c0, *p, 0, p->cols());
    c0 += p->cols();
  }
  conv1d_silu_bwd(dy, x, w, seq, dx);
}

namespace {
// g (F32) and β (compute dtype) [T, HV] from the gate inputs.
std::pair<Tensor, Tensor> gdn_gate_tensors(Backend& be, const Backend::GdnGateInputs& gates) {
  const int64_t HV = gates.A_log.numel(), T = HV ? gates.a.numel() / HV : 0;
  Tensor g = be.alloc({T, HV}, DType::F32), beta = be.alloc({T, HV}, be.compute_dtype());
  be.gdn_gates_fwd(gates.a, gates.b, gates.A_log, gates.dt_bias, g, beta);
  return {g, beta};
}
}  // namespace

std::shared_ptr<Backend::GdnSaved> Backend::gdn_gated_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const GdnGateInputs& gates, const SeqLayout& seq,
                                                          float scale, Tensor& o,
                                                          std::optional<GdnKeep> keep) {
  const auto [g, beta] = gdn_gate_tensors(*this, gates);
  if (keep) return gdn_fwd_keep(q, k, v, g, beta, seq, scale, o, *keep);
  gdn_fwd(q, k, v, g, beta, seq, scale, o);
  return nullptr;
}

void Backend::gdn_gated_bwd(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const GdnGateInputs& gates, const SeqLayout& seq, float scale,
                            Tensor& dq, Tensor& dk, Tensor& dv, Tensor& da, Tensor& db) {
  const auto [g, beta] = gdn_gate_tensors(*this, gates);
  Tensor dg = alloc(g.shape, DType::F32), dbeta = alloc(beta.shape, beta.dtype);
  gdn_bwd_saved(saved, dout, q, k, v, g, beta, seq, scale, dq, dk, dv, dg, dbeta);
  gdn_gates_bwd(dg, dbeta, gates.a, gates.b, gates.A_log, gates.dt_bias, da, db);
}

double Backend::linear_cross_entropy(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                     Tensor* dh, int64_t chunk_rows, LossLogits /*logits: the compute dtype's*/) {
  const int64_t T = h.rows(), V = w.dim(0);
  chunk_rows = std::max<int64_t>(1, std::min(chunk_rows, T));
  Tensor logits = alloc({chunk_rows, V}, compute_dtype());
  double total = 0;
  for (int64_t t0 = 0; t0 < T; t0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, T - t0);
    Tensor hc = h.view({T, h.cols()}).slice(t0, t0 + n);
    Tensor lc = logits.slice(0, n);
    gemm(hc, false, w, true, lc, 1.f, 0.f);
    Tensor yc = labels.slice(t0, t0 + n);
    total += cross_entropy(lc, yc, grad_scale, dh ? &lc : nullptr);
    if (dh) {
      Tensor dhc = dh->view({T, h.cols()}).slice(t0, t0 + n);
      gemm(lc, false, w, false, dhc, 1.f, 0.f);
    }
  }
  return total;
}

void Backend::grouped_gemm_lora(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, const Tensor& u,
                                const Tensor& l, float lscale, Tensor& y, float alpha, float beta) {
  grouped_gemm(x, w, trans_w, offsets, y, alpha, beta);
  grouped_gemm(u, l, trans_w, offsets, y, lscale, 1.f);
}

void Backend::grouped_lora_linear_fwd(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& offsets,
                                      const Tensor& l, float lscale, Tensor& u, Tensor& y) {
  grouped_gemm(x, a, true, offsets, u, 1.f, 0.f);
  grouped_gemm_lora(x, w, true, offsets, u, l, lscale, y, 1.f, 0.f);
}

void Backend::swiglu_packed_fwd(const Tensor& gu, Tensor& h) {
  const int64_t n = gu.rows(), I = gu.cols() / 2;
  check(gu.cols() == 2 * I && h.rows() == n && h.cols() == I, [&] {
    return "swiglu_packed_fwd: gu " + shape_str(gu.shape) + ", h " + shape_str(h.shape) +
           " (expected [n, 2I], [n, I])";
  });
  Tensor g = alloc({n, I}, gu.dtype), up = alloc({n, I}, gu.dtype);
  copy_cols(g, 0, gu, 0, I);
  copy_cols(up, 0, gu, I, I);
  swiglu_fwd(g, up, h);
}

void Backend::swiglu_packed_bwd(const Tensor& dh, const Tensor& gu, Tensor& dgu) {
  const int64_t n = gu.rows(), I = gu.cols() / 2;
  check(gu.cols() == 2 * I && dh.rows() == n && dh.cols() == I && dgu.rows() == n && dgu.cols() == 2 * I,
        [&] {
          return "swiglu_packed_bwd: dh " + shape_str(dh.shape) + ", gu " + shape_str(gu.shape) + ", dgu " +
                 shape_str(dgu.shape) + " (expected [n, I], [n, 2I], [n, 2I])";
        });
  Tensor g = alloc({n, I}, gu.dtype), up = alloc({n, I}, gu.dtype);
  copy_cols(g, 0, gu, 0, I);
  copy_cols(up, 0, gu, I, I);
  Tensor dg = alloc({n, I}, dgu.dtype), du = alloc({n, I}, dgu.dtype);
  swiglu_bwd(dh, g, up, dg, du);
  copy_cols(dgu, 0, dg, 0, I);
  copy_cols(dgu, I, du, 0, I);
}

void Backend::copy_many(const std::vector<CopyPair>& pairs) {
  for (const CopyPair& p : pairs) copy(*p.dst, *p.src);
}

double Backend::sum_squares_many(const std::vector<const Tensor*>& xs) {
  double total = 0;
  for (const Tensor* x : xs) total += sum_squares(*x);
  return total;
}

bool Backend::all_finite_many(const std::vector<const Tensor*>& xs) {
  for (const Tensor* x : xs)
    if (!all_finite(*x)) return false;
  return true;
}

void Backend::adamw_step_many(const std::vector<AdamWSlot>& slots, float lr, float beta1, float beta2, float eps,
                              float weight_decay, int64_t step, float grad_scale) {
  for (const AdamWSlot& s : slots) {
    if (grad_scale == 1.f) {
      adamw_step(*s.param, *s.grad, *s.m, *s.v, lr, beta1, beta2, eps, weight_decay, step);
      continue;
    }
    Tensor g = alloc(s.grad->shape, DType::F32);  // scaled in fp32 whatever the gradient's type
    copy(g, *s.grad);
    scale(g, grad_scale);
    adamw_step(*s.param, g, *s.m, *s.v, lr, beta1, beta2, eps, weight_decay, step);
  }
}

void Backend::conv1d_silu_step(const Tensor&, const Tensor&, const SeqLayout&, Tensor&, Tensor&) {
  throw Error("conv1d_silu_step: the " + name() + " backend has no generation ops");
}
void Backend::gdn_recurrent(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const SeqLayout&, float, Tensor&, Tensor&) {
  throw Error("gdn_recurrent: the " + name() + " backend has no generation ops");
}
void Backend::gdn_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          const SeqLayout& seq, float scale, Tensor& state, Tensor& o) {
  fill(state, 0.f);
  gdn_recurrent(q, k, v, g, beta, seq, scale, state, o);
}
void Backend::kv_cache_write(const Tensor&, const Tensor&, const SeqLayout&, Tensor&, Tensor&) {
  throw Error("kv_cache_write: the " + name() + " backend has no generation ops");
}
void Backend::attention_cached(const Tensor&, const Tensor&, const Tensor&, const SeqLayout&, float, Tensor&) {
  throw Error("attention_cached: the " + name() + " backend has no generation ops");
}

void Backend::rmsnorm_bwd_add(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                              bool zero_centred, const Tensor& residual, Tensor& dx) {
  check(residual.numel() == dx.numel(), [&] {
    return "rmsnorm_bwd_add: residual " + shape_str(residual.shape) + " for dx " + shape_str(dx.shape);
  });
  rmsnorm_bwd(dy, x, w, rstd, zero_centred, dx);
  add(dx, residual, 1.f);
}

void Backend::linear_cross_entropy_into(const Tensor& h, const Tensor& w, const Tensor& labels,
                                        const Tensor& grad_scale, Tensor* dh, int64_t chunk_rows, LossLogits logits,
                                        Tensor& loss_sum) {
  check(loss_sum.nbytes() == sizeof(double), [&] {
    return "linear_cross_entropy_into: loss_sum must be 8 bytes, got " + shape_str(loss_sum.shape) + " " +
           dtype_name(loss_sum.dtype);
  });
  check(grad_scale.dtype == DType::F32 && grad_scale.numel() == 1, [&] {
    return std::string("linear_cross_entropy_into: grad_scale must be F32 [1], got ") +
           dtype_name(grad_scale.dtype) + " " + shape_str(grad_scale.shape);
  });
  const float scale = download(grad_scale, DType::F32).ptr<float>()[0];
  const double v = linear_cross_entropy(h, w, labels, scale, dh, chunk_rows, logits);
  Tensor host = host_tensor(loss_sum.shape, loss_sum.dtype);
  std::memcpy(host.data, &v, sizeof v);
  copy(loss_sum, upload(host, loss_sum.dtype));
}

void Backend::replay(Recording&) { throw Error("replay: the " + name() + " backend records nothing"); }

namespace {

// write_i32 / write_f32 of a host backend: `values` into dst (of dtype `dt`, as many elements) in place.
template <typename T>
void write_host_values(const Backend& be, Tensor& dst, const std::vector<T>& values, DType dt, const char* op) {
  check(dst.dtype == dt && dst.numel() == static_cast<int64_t>(values.size()), [&] {
    return std::string(op) + ": " + std::to_string(values.size()) + " values into " + dtype_name(dst.dtype) +
           " " + shape_str(dst.shape);
  });
  check(dst.device == Device::CPU, [&] {
    return std::string(op) + ": the " + be.name() + " backend must write its own device tensors";
  });
  std::copy(values.begin(), values.end(), dst.ptr<T>());
}

}  // namespace

void Backend::write_i32(Tensor& dst, const std::vector<int32_t>& values) {
  write_host_values(*this, dst, values, DType::I32, "write_i32");
}

void Backend::write_f32(Tensor& dst, const std::vector<float>& values) {
  write_host_values(*this, dst, values, DType::F32, "write_f32");
}

}  // namespace deltatune
