#include "model/lora_linear.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backend/quant_ops.h"
#include "core/error.h"

namespace deltatune {

const Tensor& lora_factor_a(const LoraModule& m) { return m.Ac.defined() ? m.Ac : m.A; }
const Tensor& lora_factor_b(const LoraModule& m) { return m.Bc.defined() ? m.Bc : m.B; }


// The scratch is freed when the caller's product is enqueued (quantized base, core/quantized.h).
Tensor plain_weight(Backend& be, const BaseMatrix& m) {
  if (!m.q) return m.w;
  Tensor d = be.alloc(m.q->shape, be.compute_dtype());
  quant_ops(be).dequantize(*m.q, d);
  return d;
}

// y (=) x·Wᵀ (trans_w) or x·W, plus beta·y: FP8 weights multiplied as FP8 where the backend has block-scaled
// FP8 GEMMs for them, otherwise through a dequantized scratch (or the plain weight).
void base_gemm(Backend& be, const Tensor& x, const BaseMatrix& w, bool trans_w, Tensor& y, float beta) {
  if (w.q && quant_ops(be).fp8_gemm(x, *w.q, trans_w, y, beta)) return;
  const Tensor p = plain_weight(be, w);
  be.gemm(x, false, p, trans_w, y, 1.f, beta);
}

LoraComputeCopies::LoraComputeCopies(Backend& be, LoraAdapter* lora) {
  if (!lora) return;
  lora_ = lora;
  const DType dt = be.compute_dtype();
  std::vector<Backend::CopyPair> pairs;
  // Modules that share an input (same parent path) get their A copies stacked in lora_input_share_rank order,
  // one tensor per parent, so that linear_group_fwd/bwd read all of them as one matrix (F32 compute too).
  std::map<std::string, std::vector<LoraModule*>> shared;
  for (LoraModule& m : lora->modules) {
    if (m.experts > 0) continue;
    if (lora_input_share_rank(m) >= 0) shared[m.path.substr(0, m.path.rfind('.'))].push_back(&m);
    if (m.A.dtype == dt) continue;
    if (lora_input_share_rank(m) < 0) {
      m.Ac = be.alloc(m.A.shape, dt);
      pairs.push_back({&m.Ac, &m.A});
    }
    m.Bc = be.alloc(m.B.shape, dt);
    pairs.push_back({&m.Bc, &m.B});
  }
  for (auto& [parent, ms] : shared) {
    std::sort(ms.begin(), ms.end(), [](const LoraModule* a, const LoraModule* b) {
      return lora_input_share_rank(*a) < lora_input_share_rank(*b);
    });
    const bool stack = ms.size() > 1 && std::all_of(ms.begin(), ms.end(), [&](const LoraModule* m) {
      return m->r == ms[0]->r && m->in == ms[0]->in && m->A.dtype == ms[0]->A.dtype;
    });
    if (!stack && ms[0]->A.dtype == dt) continue;  // each module reads its own A as it is
    Tensor all;
    if (stack) all = be.alloc({static_cast<int64_t>(ms.size()) * ms[0]->r, ms[0]->in}, dt);
    for (size_t i = 0; i < ms.size(); ++i) {
      const int64_t r = ms[i]->r;
      ms[i]->Ac = stack ? all.slice(static_cast<int64_t>(i) * r, static_cast<int64_t>(i + 1) * r)
                        : be.alloc(ms[i]->A.shape, dt);
      pairs.push_back({&ms[i]->Ac, &ms[i]->A});
    }
  }
  be.copy_many(pairs);
}

LoraComputeCopies::~LoraComputeCopies() {
  if (!lora_) return;
  for (LoraModule& m : lora_->modules) {
    m.Ac = Tensor();
    m.Bc = Tensor();
  }
}

void linear_fwd_cache(Backend& be, const Tensor& x, LoraModule* lora, const LoraRuntime& rt, uint64_t module_salt,
                      LinearCache& cache) {
  cache.x = x;
  if (!lora) return;
  Tensor xin = x;
  if (rt.training && rt.dropout > 0.f) {
    cache.xd = be.alloc(x.shape, x.dtype);
    be.dropout(x, rt.dropout, lora_module_seed(rt, module_salt), cache.xd);
    xin = cache.xd;
  }
  cache.u = be.alloc({x.rows(), lora->r}, be.compute_dtype());
  be.gemm(xin, false, lora_factor_a(*lora), true, cache.u, 1.f, 0.f);
}

void linear_fwd(Backend& be, const Tensor& x, const BaseMatrix& wq, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, Tensor& y, LinearCache& cache, const Tensor* residual) {
  linear_fwd_cache(be, x, lora, rt, module_salt, cache);
  if (!lora) {
    if (residual) be.copy(y, *residual);
    base_gemm(be, x, wq, true, y, residual ? 1.f : 0.f);
    return;
  }
  // The rank-r term (with the residual) first, then the base product accumulates into it: the base GEMM's epilogue
  // reads y once, where adding the rank-r term afterwards took another read and write of the whole output.
  be.lora_up(cache.u, lora_factor_b(*lora), lora->scaling, residual, y);
  base_gemm(be, x, wq, true, y, 1.f);
}

bool linear_bwd(Backend& be, const Tensor& dy, const BaseMatrix& wq, LoraModule* lora, const LoraRuntime& rt,
                uint64_t module_salt, const LinearCache& cache, Tensor& dx, bool accumulate, Tensor* deferred_du) {
  const float dx_beta = accumulate ? 1.f : 0.f;
  if (!lora) {
    base_gemm(be, dy, wq, false, dx, dx_beta);
    return false;
  }
  const bool dropped = rt.training && rt.dropout > 0.f;
  const Tensor& xin = dropped ? cache.xd : cache.x;
  // dB += s·dyᵀ·u and du = s·dy·B (one read of dy where the backend can) ; dA += duᵀ·xin ; dx (+)= dropout(du·A),
  // then dx += dy·W (as in linear_fwd, the base product goes last and accumulates in its epilogue).
  Tensor du = be.alloc({dy.rows(), lora->r}, be.compute_dtype());  // like u: the operand type of both its products
  be.lora_dy_products(dy.view({dy.rows(), dy.cols()}), lora_factor_b(*lora), cache.u, lora->scaling, du, lora->gB);
  be.gemm(du, true, xin, false, lora->gA, 1.f, 1.f);
  if (deferred_du && !dropped) {  // the caller adds du·A to dx: only the base product here
    base_gemm(be, dy, wq, false, dx, dx_beta);
    *deferred_du = du;
    return true;
  }
  if (!dropped) {
    be.gemm(du, false, lora_factor_a(*lora), false, dx, 1.f, dx_beta);
  } else {
    Tensor dxd = be.alloc(dx.shape, dx.dtype);
    be.gemm(du, false, lora_factor_a(*lora), false, dxd, 1.f, 0.f);
    Tensor masked = be.alloc(dx.shape, dx.dtype);
    be.dropout(dxd, rt.dropout, lora_module_seed(rt, module_salt), masked);
    if (accumulate) be.add(dx, masked, 1.f);
    else be.copy(dx, masked);
  }
  base_gemm(be, dy, wq, false, dx, 1.f);
  return false;
}

namespace {

// The stacked A copies [Σr, in] of the modules, when the grouped products apply (see lora_linear.h).
bool stacked_factors(std::span<const SharedInputModule> ms, const LoraRuntime& rt, Tensor& stacked) {
  if (ms.size() < 2 || (rt.training && rt.dropout > 0.f)) return false;
  const LoraModule* first = ms[0].lora;
  if (!first || !first->Ac.defined()) return false;
  const char* next = static_cast<const char*>(first->Ac.data);
  int64_t rows = 0;
  for (const SharedInputModule& m : ms) {
    const LoraModule* l = m.lora;
    if (!l || !l->Ac.defined() || l->Ac.data != next || l->Ac.storage != first->Ac.storage || l->r != first->r ||
        l->Ac.dtype != first->Ac.dtype || l->Ac.cols() != first->Ac.cols())
      return false;
    next += l->Ac.nbytes();
    rows += l->r;
  }
  stacked = first->Ac;
  stacked.shape = {rows, first->Ac.cols()};
  return true;
}

// The gA of the modules as one F32 [Σr, in] matrix, when they lie side by side in that order (lora_to_backend's
// layout of grad_flat).
bool stacked_grads(std::span<const SharedInputModule> ms, Tensor& stacked) {
  const Tensor& first = ms[0].lora->gA;
  if (!first.defined() || first.dtype != DType::F32) return false;
  const char* next = static_cast<const char*>(first.data);
  int64_t rows = 0;
  for (const SharedInputModule& m : ms) {
    const Tensor& g = m.lora->gA;
    if (!g.defined() || g.data != next || g.storage != first.storage || g.dtype != DType::F32 || g.ndim() != 2 ||
        g.cols() != first.cols())
      return false;
    next += g.nbytes();
    rows += g.rows();
  }
  stacked = first;
  stacked.shape = {rows, first.cols()};
  return true;
}

// Which modules' base weights the backend multiplies as FP8 (QuantOps::fp8_gemm_takes).
std::vector<bool> fp8_members(Backend& be, std::span<const SharedInputModule> ms) {
  std::vector<bool> fp8(ms.size(), false);
  for (size_t i = 0; i < ms.size(); ++i) fp8[i] = ms[i].w->q && quant_ops(be).fp8_gemm_takes(*ms[i].w->q);
  return fp8;
}

}  // namespace

bool linear_group_fwd(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms, const LoraRuntime& rt,
                      std::span<Tensor* const> ys, LinearGroupCache& cache, bool defer_rank_r) {
  check(ms.size() == ys.size(), "internal: linear_group_fwd needs one output per module");
  cache.x = x;
  Tensor A;
  if (!stacked_factors(ms, rt, A)) {
    cache.each.assign(ms.size(), LinearCache{});
    for (size_t i = 0; i < ms.size(); ++i)
      linear_fwd(be, x, *ms[i].w, ms[i].lora, rt, ms[i].salt, *ys[i], cache.each[i]);
    return false;
  }
  const int64_t r = ms[0].lora->r;
  cache.u = be.alloc({x.rows(), A.rows()}, be.compute_dtype());
  be.gemm(x, false, A, true, cache.u, 1.f, 0.f);
  // As in linear_fwd: the rank-r term first, the base product accumulates into it (or the caller adds the terms).
  const float base_beta = defer_rank_r ? 0.f : 1.f;
  for (size_t i = 0; i < ms.size() && !defer_rank_r; ++i) {
    const LoraModule& l = *ms[i].lora;
    be.lora_up({cache.u, static_cast<int64_t>(i) * r, r}, lora_factor_b(l), l.scaling, nullptr, *ys[i]);
  }
  // The FP8 weights share one quantization of x; the others (all of them where that is refused) one by one.
  const std::vector<bool> fp8 = fp8_members(be, ms);
  std::vector<const QuantizedWeight*> fp8_w;
  std::vector<Tensor*> fp8_y;
  for (size_t i = 0; i < ms.size(); ++i)
    if (fp8[i]) fp8_w.push_back(ms[i].w->q.get()), fp8_y.push_back(ys[i]);
  const bool shared = fp8_w.size() > 1 && quant_ops(be).fp8_gemm_shared(x, fp8_w, fp8_y, base_beta);
  for (size_t i = 0; i < ms.size(); ++i)
    if (!(shared && fp8[i])) base_gemm(be, x, *ms[i].w, true, *ys[i], base_beta);
  return defer_rank_r;
}

void linear_group_fwd_cache(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms,
                            const LoraRuntime& rt, LinearGroupCache& cache) {
  cache.x = x;
  Tensor A;
  if (!stacked_factors(ms, rt, A)) {
    cache.each.assign(ms.size(), LinearCache{});
    for (size_t i = 0; i < ms.size(); ++i) linear_fwd_cache(be, x, ms[i].lora, rt, ms[i].salt, cache.each[i]);
    return;
  }
  cache.u = be.alloc({x.rows(), A.rows()}, be.compute_dtype());
  be.gemm(x, false, A, true, cache.u, 1.f, 0.f);
}

void linear_group_bwd(Backend& be, std::span<const Tensor* const> dys, std::span<const SharedInputModule> ms,
                      const LoraRuntime& rt, const LinearGroupCache& cache, Tensor& dx, bool accumulate) {
  check(ms.size() == dys.size(), "internal: linear_group_bwd needs one gradient per module");
  if (!cache.u.defined()) {
    check(cache.each.size() == ms.size(), "internal: linear_group_bwd without its forward's cache");
    for (size_t i = 0; i < ms.size(); ++i)
      linear_bwd(be, *dys[i], *ms[i].w, ms[i].lora, rt, ms[i].salt, cache.each[i], dx, accumulate || i > 0);
    return;
  }
  Tensor A;
  check(stacked_factors(ms, rt, A), "internal: linear_group_bwd without the stacked factors of its forward");
  const int64_t r = ms[0].lora->r;
  // dB_i += s·dy_iᵀ·u_i and du_i = s·dy_i·B_i (one read of dy_i where the backend can) ; dA_i += du_iᵀ·x (every
  // module's in one product, reading x once, where their gradients lie side by side); then dx (+)= du·A for every
  // module at once and the base products accumulate into dx.
  Tensor du = be.alloc(cache.u.shape, be.compute_dtype());
  Tensor gA;
  const bool one_gA = stacked_grads(ms, gA);
  for (size_t i = 0; i < ms.size(); ++i) {
    LoraModule& l = *ms[i].lora;
    const Backend::Cols ui{cache.u, static_cast<int64_t>(i) * r, r}, dui{du, static_cast<int64_t>(i) * r, r};
    be.lora_dy_products(dys[i]->view({dys[i]->rows(), dys[i]->cols()}), lora_factor_b(l), ui, l.scaling, dui, l.gB);
    if (!one_gA) be.gemm_cols(dui, true, cache.x, false, l.gA, 1.f, 1.f);
  }
  if (one_gA) be.gemm(du, true, cache.x, false, gA, 1.f, 1.f);
  be.gemm(du, false, A, false, dx, 1.f, accumulate ? 1.f : 0.f);
  // The FP8 weights: one product over their concatenated outputs (dx += [dy_1 dy_2 ..]·[W_1; W_2; ..]).
  const std::vector<bool> fp8 = fp8_members(be, ms);
  std::vector<const QuantizedWeight*> fp8_w;
  std::vector<const Tensor*> fp8_dy;
  for (size_t i = 0; i < ms.size(); ++i)
    if (fp8[i]) fp8_w.push_back(ms[i].w->q.get()), fp8_dy.push_back(dys[i]);
  const bool summed = fp8_w.size() > 1 && quant_ops(be).fp8_gemm_sum(fp8_dy, fp8_w, dx, 1.f);
  for (size_t i = 0; i < ms.size(); ++i)
    if (!(summed && fp8[i])) base_gemm(be, *dys[i], *ms[i].w, false, dx, 1.f);
}

}  // namespace deltatune
