#include "model/lora_linear.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backend/lora_kcat_ops.h"
#include "backend/quant_ops.h"
#include "core/error.h"

namespace deltatune {

const Tensor& lora_factor_a(const LoraModule& m) { return m.Ac.defined() ? m.Ac : m.A; }
const Tensor& lora_factor_b(const LoraModule& m) { return m.Bc.defined() ? m.Bc : m.B; }


// The scratch is freed when the caller's product is enqueued (quantized base, core/quantized.h).
Tensor plain_weight(Backend& be, const BaseMatrix& m) {
  check(m.pad == 0, "internal: plain_weight of a matrix padded for the K-concatenated LoRA products");
  if (!m.q) return m.w;
  Tensor d = be.alloc(m.q->shape, be.compute_dtype());
  quant_ops(be).dequantize(*m.q, d);
  return d;
}

// y (=) x·Wᵀ (trans_w) or x·W, plus beta·y: FP8 weights multiplied as FP8 where the backend has block-scaled
// FP8 GEMMs for them, otherwise through a dequantized scratch (or the plain weight).
void base_gemm(Backend& be, const Tensor& x, const BaseMatrix& w, bool trans_w, Tensor& y, float beta) {
  if (w.q && quant_ops(be).fp8_gemm(x, *w.q, trans_w, y, beta)) return;
  if (w.pad > 0) {  // the matrix's columns of the padded storage, read in place
    be.gemm_cols(x, false, Backend::Cols(w.w, 0, w.dim(1)), trans_w, y, 1.f, beta);
    return;
  }
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

// Whether member i's base matrix is padded for the K-concatenation with its module's rank (pad (i+1)·r).
bool kcat_padded(std::span<const SharedInputModule> ms) {
  if (ms.size() < 2) return false;
  for (size_t i = 0; i < ms.size(); ++i) {
    const BaseMatrix& w = *ms[i].w;
    const LoraModule* l = ms[i].lora;
    if (!l || w.q || w.pad != static_cast<int64_t>(i + 1) * l->r || l->r != ms[0].lora->r) return false;
  }
  return true;
}

}  // namespace

int64_t kcat_cols(Backend& be, std::span<const SharedInputModule> ms, const LoraRuntime& rt) {
  Tensor A;
  if (!lora_kcat_ops(be) || !kcat_padded(ms) || !stacked_factors(ms, rt, A)) return 0;
  return A.rows();
}

namespace {

// The pads of a group's members for kcat ((i+1)·r columns), or empty where the group does not qualify.
std::vector<int64_t> kcat_pads(Backend& be, const KcatPadGroup& g) {
  const std::span<BaseMatrix* const> ws = g.ws;
  const std::span<LoraModule* const> loras = g.loras;
  check(ws.size() == loras.size(), "internal: kcat_pad_weights needs one module per matrix");
  if (!lora_kcat_ops(be) || be.compute_dtype() != DType::BF16 || ws.size() < 2) return {};
  const int64_t in = ws[0]->dim(1);
  std::vector<int64_t> pads;
  for (size_t i = 0; i < ws.size(); ++i) {
    const BaseMatrix& w = *ws[i];
    const LoraModule* l = loras[i];
    if (w.q || !w.w.defined() || w.w.dtype != DType::BF16 || w.w.ndim() != 2 || w.dim(1) != in || in % 8 != 0 ||
        !l || l->experts > 0 || l->r != loras[0]->r || l->r % 8 != 0 || l->in != in)
      return {};
    pads.push_back(static_cast<int64_t>(i + 1) * l->r);
  }
  return pads;
}

// Elements of a padded matrix in a shared buffer, rounded to 128 (256-byte aligned starts).
int64_t padded_elems(const BaseMatrix& w, int64_t pad) { return (w.dim(0) * (w.dim(1) + pad) + 127) / 128 * 128; }

}  // namespace

size_t kcat_pad_weights(Backend& be, std::span<KcatPadGroup> groups) {
  // Batches of groups up to kBatch bytes share one allocation (a block per matrix would round each up to the
  // allocator's 2 MiB); the replaced matrices go back to the device after each batch, so the transient is one
  // batch.
  constexpr int64_t kBatch = int64_t{256} << 20;
  size_t padded = 0;
  std::vector<std::pair<KcatPadGroup*, std::vector<int64_t>>> batch;
  int64_t batch_elems = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    Tensor flat = be.alloc({batch_elems}, DType::BF16);
    be.fill(flat, 0.f);
    int64_t off = 0;
    for (auto& [g, pads] : batch) {
      for (size_t i = 0; i < g->ws.size(); ++i) {
        BaseMatrix& w = *g->ws[i];
        const int64_t out = w.dim(0), in = w.dim(1), n = padded_elems(w, pads[i]);
        Tensor m = flat.slice(off, off + out * (in + pads[i])).view({out, in + pads[i]});
        be.copy_cols(m, 0, w.w, 0, in);
        w.w = m;
        w.pad = pads[i];
        off += n;
      }
    }
    batch.clear();
    batch_elems = 0;
    flat = Tensor();
    lora_kcat_ops(be)->release_cached_memory();
  };
  for (KcatPadGroup& g : groups) {
    std::vector<int64_t> pads = kcat_pads(be, g);
    if (pads.empty()) continue;
    ++padded;
    bool done = true;
    int64_t elems = 0;
    for (size_t i = 0; i < g.ws.size(); ++i) {
      done = done && g.ws[i]->pad == pads[i];
      elems += padded_elems(*g.ws[i], pads[i]);
    }
    if (done) continue;
    if (!batch.empty() && (batch_elems + elems) * 2 > kBatch) flush();
    batch.emplace_back(&g, std::move(pads));
    batch_elems += elems;
  }
  flush();
  return padded;
}

void kcat_write_tails(Backend& be, std::span<const SharedInputModule> ms) {
  LoraKcatOps* ops = lora_kcat_ops(be);
  if (!ops || !kcat_padded(ms)) return;
  std::vector<const Tensor*> srcs;
  std::vector<float> alphas;
  std::vector<Backend::Cols> dsts;
  const int64_t in = ms[0].w->dim(1);
  for (size_t i = 0; i < ms.size(); ++i) {
    const LoraModule& l = *ms[i].lora;
    srcs.push_back(&lora_factor_b(l));
    alphas.push_back(l.scaling);
    dsts.emplace_back(ms[i].w->w, in + static_cast<int64_t>(i) * l.r, l.r);
  }
  ops->scaled_copies_into(srcs, alphas, dsts);
}

namespace {

// Where x's rows are padded for the K-concatenated products (lora_linear.h): u = x·Aᵀ of the stacked factors
// written into the pad, and the pad's width returned; 0 (nothing done) for rows of the modules' input width.
int64_t kcat_u_into_tail(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms, const LoraRuntime& rt,
                         const char* caller) {
  const int64_t in = ms[0].w->dim(1);
  if (x.ndim() != 2 || x.cols() <= in) return 0;
  Tensor A;
  const int64_t R = kcat_cols(be, ms, rt);
  if (R <= 0 || x.cols() != in + R || !stacked_factors(ms, rt, A))  // the message built only on failure
    throw Error(std::string("internal: ") + caller + " got padded rows its modules do not K-concatenate");
  be.gemm_cols(Backend::Cols(x, 0, in), false, A, true, Backend::Cols(x, in, R), 1.f, 0.f);
  return R;
}

}  // namespace

bool linear_group_fwd(Backend& be, const Tensor& x, std::span<const SharedInputModule> ms, const LoraRuntime& rt,
                      std::span<Tensor* const> ys, LinearGroupCache& cache, bool defer_rank_r) {
  check(ms.size() == ys.size(), "internal: linear_group_fwd needs one output per module");
  cache.x = x;
  cache.kcat = kcat_u_into_tail(be, x, ms, rt, "linear_group_fwd");
  if (cache.kcat > 0) {
    const int64_t in = ms[0].w->dim(1);
    for (size_t i = 0; i < ms.size(); ++i) {
      const int64_t k = in + ms[i].w->pad;
      be.gemm_cols(Backend::Cols(x, 0, k), false, Backend::Cols(ms[i].w->w, 0, k), true, *ys[i], 1.f, 0.f);
    }
    return false;
  }
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
  cache.kcat = kcat_u_into_tail(be, x, ms, rt, "linear_group_fwd_cache");
  if (cache.kcat > 0) return;
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
  if (!cache.u.defined() && cache.kcat == 0) {
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
  // x and u: the padded rows' two column blocks (K-concatenated forward), else the input and cache.u.
  const int64_t in = cache.x.cols() - cache.kcat;
  const Backend::Cols xin(cache.x, 0, in);
  const Backend::Cols u = cache.kcat ? Backend::Cols(cache.x, in, cache.kcat) : Backend::Cols(cache.u);
  Tensor du = be.alloc({cache.x.rows(), u.width()}, be.compute_dtype());
  Tensor gA;
  const bool one_gA = stacked_grads(ms, gA);
  for (size_t i = 0; i < ms.size(); ++i) {
    LoraModule& l = *ms[i].lora;
    const Backend::Cols ui{u.t, u.col + static_cast<int64_t>(i) * r, r}, dui{du, static_cast<int64_t>(i) * r, r};
    be.lora_dy_products(dys[i]->view({dys[i]->rows(), dys[i]->cols()}), lora_factor_b(l), ui, l.scaling, dui, l.gB);
    if (!one_gA) be.gemm_cols(dui, true, xin, false, l.gA, 1.f, 1.f);
  }
  if (one_gA && cache.kcat) be.gemm_cols(du, true, xin, false, gA, 1.f, 1.f);
  else if (one_gA) be.gemm(du, true, cache.x, false, gA, 1.f, 1.f);
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
