// CudaBackend sequence ops (attention, GDN core) and losses: shape checks, scratch from the caching
// allocator, launcher calls.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "attention/attention.cuh"
#include "attention/attention_tile_list.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "gdn/gdn.cuh"
#include "loss/loss.cuh"

namespace deltatune::cuda {

namespace {
float* fptr(const Tensor& t) { return static_cast<float*>(t.data); }
const int32_t* iptr(const Tensor& t) { return static_cast<const int32_t*>(t.data); }
}  // namespace

Tensor CudaBackend::attention_tiles(const SeqLayout& seq) {
  return layout_tables_
      .get(LayoutTables::Kind::AttnTiles, seq.host_cu_seqlens,
           [&](LayoutTables::Entry& e) {
             std::vector<int32_t> tiles;
             const auto& cu = seq.host_cu_seqlens;
             for (size_t n = 0; n + 1 < cu.size(); ++n)
               for (int32_t t = cu[n]; t < cu[n + 1]; t += kernels::kAttnTile) {
                 tiles.push_back(static_cast<int32_t>(n));
                 tiles.push_back(t);
               }
             if (!tiles.empty())
               e.a = upload_bytes(tiles.data(), {static_cast<int64_t>(tiles.size() / 2), 2}, DType::I32);
           })
      .a;
}

Tensor CudaBackend::attention_tiles_mma(const SeqLayout& seq) {
  return layout_tables_
      .get(LayoutTables::Kind::AttnTilesMma, seq.host_cu_seqlens,
           [&](LayoutTables::Entry& e) {
             const std::vector<int32_t> flat = kernels::attention_mma_tile_list(seq.host_cu_seqlens);
             if (!flat.empty())
               e.a = upload_bytes(flat.data(), {static_cast<int64_t>(flat.size() / 2), 2}, DType::I32);
           })
      .a;
}

namespace {
// Tensor-core attention (mma.sync, every GPU): BF16 operands and 16-byte aligned rows for cp.async at a
// supported head_dim; BF16 operands at another head_dim in (64, 256] (the 9B vision tower's 72) run zero-padded
// to the next supported one (attention_mma_padded_hd, 72 -> 96: a third more tensor work; padded copies are
// aligned). Below 64 padding would at least double the work and the fp32 FMA kernels stay (they also keep P in
// fp32: the tiny vision golden's bf16 loss is 2.4e-3 from transformers' fp32 with its head dims 16 and 32
// padded onto the tensor cores, 8.3e-5 on the FMA kernels; transformers' own bf16 is 1.6e-3 to 3.7e-3 there).
// The fp32 FMA kernels are the fallback for the rest (F32/F16 inputs, unaligned views at a supported head_dim,
// or a device whose shared memory does not take the tensor-core tiles).
bool attention_mma_ok(std::initializer_list<const Tensor*> ins, int hd) {
  constexpr int kMinPaddedHeadDim = 64;
  const bool exact = kernels::attention_mma_supported(hd);
  if (!exact && (hd < kMinPaddedHeadDim || kernels::attention_mma_padded_hd(hd) == 0)) return false;
  for (const Tensor* t : ins)
    if (t->dtype != DType::BF16 || (exact && reinterpret_cast<uintptr_t>(t->data) % 16 != 0)) return false;
  return true;
}
// Every GDN chunk kernel (forward prep and scan; backward reverse scan, state products, intra-chunk terms and
// WY backward) runs on tensor cores by default for dk = dv = 128: bf16 operands with fp32 accumulators and
// fp32 state, fp32 operands split into bf16 hi + lo where a product feeds a cancelling sum (dg, T, W).
// Measured on an H200 (backend_ops gdn cases) before the splits: dg at nmse 5.3-6.0e-4 vs the fp32 reference;
// with them see the backend_ops log. The fp32 FMA chunk kernels are the fallback for other head dims.
// The tensor-core chunk kernels run these head dims (bf16 scratch, L2 norm in the prep, the States keep) on
// every supported device (kernels::gdn_chunk_mma_fits). The fallbacks, for other head dims: the fp32 FMA
// chunk kernels where their tiles fit the device, else the per-token kernels.
bool gdn_mma_path(int dk, int dv, const kernels::KernelPolicy& pol) { return kernels::gdn_chunk_mma_fits(pol, dk, dv); }
// The fp32 FMA chunk forward's prep and scan tiles fit the device.
bool gdn_chunk_fma_fwd_fits(const GdnDims& d, const kernels::KernelPolicy& pol) {
  return std::max(kernels::gdn_chunk_prep_smem(d.dk, d.dv), kernels::gdn_chunk_scan_smem(d.dk, d.dv)) <=
         pol.smem_optin;
}
}  // namespace

// ---- attention ------------------------------------------------------------------------------------------
Tensor CudaBackend::attention_pad_head_dim(const Tensor& x, int padded_hd) {
  const int64_t rows = x.dim(0) * x.dim(1), hd = x.dim(2);
  Tensor out = alloc({x.dim(0), x.dim(1), padded_hd}, x.dtype);
  fill(out, 0.f);
  Tensor dst = out.view({rows, padded_hd});
  copy_cols(dst, 0, x.view({rows, hd}), 0, hd);
  return out;
}

void CudaBackend::attention_unpad_head_dim(const Tensor& padded, Tensor& x) {
  const int64_t rows = x.dim(0) * x.dim(1), hd = x.dim(2);
  Tensor dst = x.view({rows, hd});
  copy_cols(dst, 0, padded.view({rows, padded.dim(2)}), 0, hd);
}

void CudaBackend::attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq, float scale,
                                Tensor& o, Tensor& lse) {
  check(q.ndim() == 3 && k.ndim() == 3 && v.shape == k.shape && o.numel() == q.numel() &&
            q.dim(0) == k.dim(0) && q.dim(2) == k.dim(2) && k.dim(1) > 0 && q.dim(1) % k.dim(1) == 0 &&
            lse.numel() == q.dim(0) * q.dim(1),
        [&] {
          return "attention_fwd: q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + ", v " +
                 shape_str(v.shape) + ", lse " + shape_str(lse.shape) +
                 " (expected q [T, nH, hd], k/v [T, nKV, hd], nH % nKV == 0)";
        });
  const int hd = static_cast<int>(q.dim(2));
  check(hd <= kernels::kAttnMaxHeadDim,
        [&] { return "attention_fwd: head_dim " + std::to_string(hd) + " > 256 is not supported"; });
  check_layout(seq, q.dim(0), "attention_fwd");
  check(lse.dtype == DType::F32, "attention_fwd: lse must be F32");
  if (attention_mma_ok({&q, &k, &v}, hd) &&
      kernels::attention_fwd_mma_smem(policy_, kernels::attention_mma_padded_hd(hd)) <= policy_.smem_optin) {
    Tensor tiles = attention_tiles_mma(seq);
    if (!tiles.defined()) return;
    const int hp = kernels::attention_mma_padded_hd(hd);
    const bool pad = hp != hd;
    const Tensor qp = pad ? attention_pad_head_dim(q, hp) : q, kp = pad ? attention_pad_head_dim(k, hp) : k,
                 vp = pad ? attention_pad_head_dim(v, hp) : v;
    Tensor op = pad ? alloc({q.dim(0), q.dim(1), hp}, o.dtype) : o;
    cuda_check(kernels::launch_attention_fwd_mma(policy_, kin(qp, "attention q"), kin(kp, "attention k"),
                                                 kin(vp, "attention v"), iptr(seq.cu_seqlens), iptr(tiles),
                                                 static_cast<int>(tiles.dim(0) / 2), k.dim(0), q.dim(1), k.dim(1), hp, scale,
                                                 seq.causal, kout(op, "attention o"), fptr(lse), stream()),
               "attention_fwd (tensor cores)");
    if (pad) attention_unpad_head_dim(op, o);
    return;
  }
  check(kernels::attention_fwd_smem(hd) <= policy_.smem_optin,
        "attention_fwd: head_dim too large for shared memory");
  Tensor tiles = attention_tiles(seq);
  if (!tiles.defined()) return;
  cuda_check(kernels::launch_attention_fwd(policy_, kin(q, "attention q"), kin(k, "attention k"), kin(v, "attention v"),
                                           iptr(seq.cu_seqlens), iptr(tiles), static_cast<int>(tiles.dim(0)),
                                           q.dim(1), k.dim(1), hd, scale, seq.causal, kout(o, "attention o"),
                                           fptr(lse), stream()),
             "attention_fwd");
}

void CudaBackend::attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                const Tensor& lse, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                                Tensor& dv) {
  check(q.ndim() == 3 && k.ndim() == 3 && v.shape == k.shape && o.numel() == q.numel() &&
            dout.numel() == q.numel() && dq.numel() == q.numel() && dk.numel() == k.numel() &&
            dv.numel() == v.numel() && q.dim(0) == k.dim(0) && q.dim(2) == k.dim(2) && k.dim(1) > 0 &&
            q.dim(1) % k.dim(1) == 0 && lse.numel() == q.dim(0) * q.dim(1),
        [&] {
          return "attention_bwd: q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + ", dq " +
                 shape_str(dq.shape) + ", dk " + shape_str(dk.shape);
        });
  const int hd = static_cast<int>(q.dim(2));
  check(hd <= kernels::kAttnMaxHeadDim,
        [&] { return "attention_bwd: head_dim " + std::to_string(hd) + " is not supported"; });
  check_layout(seq, q.dim(0), "attention_bwd");
  check(lse.dtype == DType::F32, "attention_bwd: lse must be F32");
  if (attention_mma_ok({&dout, &q, &k, &v}, hd) &&
      kernels::attention_bwd_mma_smem(policy_, kernels::attention_mma_padded_hd(hd)) <= policy_.smem_optin) {
    Tensor tiles = attention_tiles_mma(seq);
    if (!tiles.defined()) return;
    const int ntiles = static_cast<int>(tiles.dim(0) / 2);
    const int hp = kernels::attention_mma_padded_hd(hd);
    const bool pad = hp != hd;
    auto padded = [&](const Tensor& x) { return pad ? attention_pad_head_dim(x, hp) : x; };
    const Tensor dop = padded(dout), qp = padded(q), kp = padded(k), vp = padded(v), op = padded(o);
    Tensor dqp = pad ? alloc({q.dim(0), q.dim(1), hp}, dq.dtype) : dq;
    Tensor dkp = pad ? alloc({k.dim(0), k.dim(1), hp}, dk.dtype) : dk;
    Tensor dvp = pad ? alloc({v.dim(0), v.dim(1), hp}, dv.dtype) : dv;
    Tensor dl = alloc({q.dim(0), q.dim(1)}, DType::F32);
    Tensor part;  // per-query-head dK, dV partials (GQA)
    if (q.dim(1) > k.dim(1)) part = alloc({2, q.dim(0), q.dim(1), hp}, DType::F32);
    cuda_check(kernels::launch_attention_bwd_mma(
                   policy_, kin(dop, "attention dout"), kin(qp, "attention q"), kin(kp, "attention k"),
                   kin(vp, "attention v"), kin(op, "attention o"), fptr(lse), fptr(dl), iptr(seq.cu_seqlens),
                   iptr(tiles), iptr(tiles) + 2 * ntiles, ntiles, q.dim(0), q.dim(1), k.dim(1), hp, scale,
                   seq.causal, kout(dqp, "attention dq"), kout(dkp, "attention dk"), kout(dvp, "attention dv"),
                   part.defined() ? fptr(part) : nullptr, stream()),
               "attention_bwd (tensor cores)");
    if (pad) {
      attention_unpad_head_dim(dqp, dq);
      attention_unpad_head_dim(dkp, dk);
      attention_unpad_head_dim(dvp, dv);
    }
    return;
  }
  check(kernels::attention_bwd_smem(hd) <= policy_.smem_optin,
        [&] { return "attention_bwd: head_dim " + std::to_string(hd) + " too large for shared memory"; });
  Tensor tiles = attention_tiles(seq);
  if (!tiles.defined()) return;
  Tensor dl = alloc({q.dim(0), q.dim(1)}, DType::F32);
  cuda_check(kernels::launch_attention_bwd(policy_, kin(dout, "attention dout"), kin(q, "attention q"), kin(k, "attention k"),
                                           kin(v, "attention v"), kin(o, "attention o"), fptr(lse), fptr(dl),
                                           iptr(seq.cu_seqlens), iptr(tiles), static_cast<int>(tiles.dim(0)),
                                           q.dim(0), q.dim(1), k.dim(1), hd, scale, seq.causal, kout(dq, "attention dq"),
                                           kout(dk, "attention dk"), kout(dv, "attention dv"), stream()),
             "attention_bwd");
}

// ---- Gated DeltaNet core ------------------------------------------------------------------------------------
namespace {
GdnDims gdn_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check(q.ndim() == 3 && k.shape == q.shape && v.ndim() == 3 && v.dim(0) == q.dim(0) && q.dim(1) > 0 &&
            v.dim(1) % q.dim(1) == 0,
        [&] {
          return std::string(op) + ": q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + ", v " +
                 shape_str(v.shape) + " (expected q/k [T, HK, dk], v [T, HV, dv], HV % HK == 0)";
        });
  return GdnDims{q.dim(0), q.dim(1), v.dim(1), static_cast<int>(q.dim(2)), static_cast<int>(v.dim(2))};
}
GdnDims gdn_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta) {
  const GdnDims d = gdn_dims(op, q, k, v);
  check(g.numel() == d.T * d.HV && beta.numel() == g.numel(), [&] {
    return std::string(op) + ": g " + shape_str(g.shape) + ", beta " + shape_str(beta.shape) + " for v " +
           shape_str(v.shape) + " (expected g/beta [T, HV])";
  });
  check(g.dtype == DType::F32, [&] { return std::string(op) + ": g must be F32"; });
  return d;
}
GdnDims gdn_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Backend::GdnGateInputs& gi) {
  const GdnDims d = gdn_dims(op, q, k, v);
  check(gi.a.numel() == d.T * d.HV && gi.b.numel() == gi.a.numel() && gi.A_log.numel() == d.HV &&
            gi.dt_bias.numel() == d.HV,
        [&] {
          return std::string(op) + ": gate inputs a " + shape_str(gi.a.shape) + ", b " +
                 shape_str(gi.b.shape) + ", A_log " + shape_str(gi.A_log.shape) + ", dt_bias " +
                 shape_str(gi.dt_bias.shape) + " for v " + shape_str(v.shape) +
                 " (expected a/b [T, HV], A_log/dt_bias [HV])";
        });
  return d;
}
kernels::GdnGates gate_ptrs(const Tensor& g, const Tensor& beta) {
  kernels::GdnGates r;
  r.g = static_cast<const float*>(g.data);
  r.beta = kin(beta, "gdn beta");
  return r;
}
kernels::GdnGates gate_ptrs(const Backend::GdnGateInputs& gi) {
  kernels::GdnGates r;
  r.a = kin(gi.a, "gdn gate a"), r.b = kin(gi.b, "gdn gate b");
  r.A_log = kin(gi.A_log, "gdn A_log"), r.dt_bias = kin(gi.dt_bias, "gdn dt_bias");
  return r;
}
}  // namespace

GdnChunks CudaBackend::gdn_chunks(const SeqLayout& seq) {
  const LayoutTables::Entry& e =
      layout_tables_.get(LayoutTables::Kind::GdnChunks, seq.host_cu_seqlens, [&](LayoutTables::Entry& t) {
        std::vector<int32_t> c, off{0};
        const auto& cu = seq.host_cu_seqlens;
        for (size_t i = 0; i + 1 < cu.size(); ++i) {
          for (int32_t s = cu[i]; s < cu[i + 1]; s += kernels::kGdnChunk) {
            c.push_back(s);
            c.push_back(std::min(kernels::kGdnChunk, cu[i + 1] - s));
          }
          off.push_back(static_cast<int32_t>(c.size() / 2));
        }
        t.n = static_cast<int64_t>(c.size() / 2);
        if (t.n == 0) c.assign(2, 0);
        t.a = upload_bytes(c.data(), {static_cast<int64_t>(c.size() / 2), 2}, DType::I32);
        t.b = upload_bytes(off.data(), {static_cast<int64_t>(off.size())}, DType::I32);
      });
  GdnChunks r;
  r.chunks = e.a, r.off = e.b, r.n = e.n;
  return r;
}

// What the chunked forward computes for the backward: normalised q/k and their rstd, the chunk list, and the
// per-chunk scratch of spec §4.2 (W, M, G, T, chunk-start states, V').
struct CudaGdnSaved final : Backend::GdnSaved {
  Tensor qn, kn, rq, rk, W, M, Gc, Tm, states, vnew;
  Tensor states_odd;   // the backward's: the odd chunks' states, formed from the kept even ones (half_states)
  bool image = false;  // the backward's W, M are operand images (the wgmma reverse scan)
  // GdnKeep::States of bf16 q, k, v: `states` holds the even chunks' states only and V' (`vnew`) is kept too
  // (kernels/gdn/gdn.cuh, GdnHalfStates): the backward's prep then forms no U and no V'.
  bool half_states = false;
  GdnChunks ch;
  bool mma = false;          // tensor-core path: W, M, Tm, states, vnew are BF16
  bool states_only = false;  // GdnKeep::States: only `states`, `Tm` (and ch) kept; the rest is recomputed
};

namespace {
// The per-token backward: the fallback where neither the tensor-core nor the FMA chunk backward fits the
// device's shared memory.
bool gdn_use_recurrent(const GdnDims& d, const kernels::KernelPolicy& pol) {
  return !gdn_mma_path(d.dk, d.dv, pol) && kernels::gdn_chunk_bwd_smem(d.dk, d.dv) > pol.smem_optin;
}
}  // namespace

void CudaBackend::gdn_check(const char* op, const GdnDims& d, const SeqLayout& seq) {
  check(gdn_mma_path(d.dk, d.dv, policy_) || gdn_chunk_fma_fwd_fits(d, policy_) ||
            kernels::gdn_core_fwd_smem(d.dk, d.dv) <= policy_.smem_optin,
        [&] {
          return std::string(op) + ": key/value head dims " + std::to_string(d.dk) + "/" +
                 std::to_string(d.dv) + " exceed shared memory";
        });
  check_layout(seq, d.T, op);
}

Tensor CudaBackend::aligned16(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 == 0) return t;
  Tensor c = alloc(t.shape, t.dtype);
  copy(c, t);
  return c;
}

void CudaBackend::gdn_l2norms(const Tensor& q, const Tensor& k, float scale, CudaGdnSaved& r, bool values) {
  const int64_t T = q.dim(0), HK = q.dim(1);
  const int dk = static_cast<int>(q.dim(2));
  if (values) {
    r.qn = alloc({T, HK, dk}, DType::F32);
    r.kn = alloc({T, HK, dk}, DType::F32);
  }
  r.rq = alloc({T, HK}, DType::F32);
  r.rk = alloc({T, HK}, DType::F32);
  cuda_check(kernels::launch_l2norm_fwd(kin(q, "gdn q"), scale, kernels::kGdnL2Eps,
                                        values ? fptr(r.qn) : nullptr, fptr(r.rq), T * HK, dk, stream()),
             "gdn (l2norm q)");
  cuda_check(kernels::launch_l2norm_fwd(kin(k, "gdn k"), 1.f, kernels::kGdnL2Eps,
                                        values ? fptr(r.kn) : nullptr, fptr(r.rk), T * HK, dk, stream()),
             "gdn (l2norm k)");
}

namespace {
// The tensor-core backward reads q and k before their norm with ρ (bf16: half the bytes of fp32 q̂, k̂), so
// q̂ and k̂ are then never materialised.
bool gdn_reads_raw_qk(const Tensor& q, const Tensor& k) {
  return q.dtype == DType::BF16 && k.dtype == DType::BF16;
}
}  // namespace

// L2 norms, then the chunked forward; `o` may be null (the backward's recompute). ForBackward also writes T,
// the chunk-start states and V'; States (tensor-core path only) also writes the chunk-start states.
std::unique_ptr<CudaGdnSaved> CudaBackend::gdn_forward_core(const Tensor& q_in, const Tensor& k_in,
                                                            const Tensor& v_in,
                                                            const kernels::GdnGates& gates,
                                                            const SeqLayout& seq, float scale, Tensor* o,
                                                            GdnScratch scratch) {
  const bool for_backward = scratch == GdnScratch::ForBackward;
  const Tensor q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  const GdnDims d = gdn_dims("gdn_fwd", q, k, v);
  auto r = std::make_unique<CudaGdnSaved>();
  cudaStream_t s = stream();
  // The tensor-core path keeps its scratch in bf16 (kernels/gdn/gdn.cuh, GdnBwdBf16; U stays fp32) and its prep
  // L2-normalises q and k while loading them.
  r->mma = gdn_mma_path(d.dk, d.dv, policy_);
  check(r->mma || !gates.a.p, "internal: gdn gates formed in the core need the tensor-core path");
  // Without output: only the per-token backward's L2 norms. With output where no chunk kernel fits the
  // device's shared memory: the per-token forward.
  const bool per_token =
      scratch == GdnScratch::None && (!o || (!r->mma && !gdn_chunk_fma_fwd_fits(d, policy_)));
  if (per_token || !r->mma) gdn_l2norms(q, k, scale, *r);
  if (!o && per_token) return r;
  if (per_token) {
    cuda_check(kernels::launch_gdn_core_fwd(fptr(r->qn), fptr(r->kn), kin(v, "gdn v"), gates.g, gates.beta,
                                            iptr(seq.cu_seqlens), static_cast<int>(seq.num_seqs()),
                                            kout(*o, "gdn o"), d.HK, d.HV, d.dk, d.dv, s),
               "gdn_fwd (per-token core)");
    return r;
  }
  r->ch = gdn_chunks(seq);
  constexpr int64_t C = kernels::kGdnChunk;
  check(r->mma || scratch != GdnScratch::States, "internal: gdn states-only keep needs the tensor-core path");
  r->states_only = scratch == GdnScratch::States;
  // Every chunk's state (no V') is the fallback for q, k, v that are not all BF16.
  r->half_states = r->states_only && gdn_reads_raw_qk(q, k) && v.dtype == DType::BF16;
  const DType st = r->mma ? DType::BF16 : DType::F32;
  const int nseq = static_cast<int>(seq.num_seqs());
  // The wgmma scan (Hopper, the forward with output) reads W, K̂, Q̂, M as per-chunk operand images and U in
  // bf16. A recompute with output (ForBackward) keeps its W and M images for the backward's reverse scan;
  // otherwise the backward recomputes them.
  const bool image = r->mma && o && kernels::gdn_scan_wgmma_selected(policy_, nseq * d.HV, d.dv, true);
  r->image = image && for_backward;
  r->W = image ? alloc({r->ch.n, d.HV, C, d.dk}, st) : alloc({d.T, d.HV, d.dk}, st);
  Tensor U = alloc({d.T, d.HV, d.dv}, image ? DType::BF16 : DType::F32);  // images: bf16 U for the wgmma scan
  r->M = alloc({r->ch.n, d.HV, C, C}, st);
  r->Gc = alloc({d.T, d.HV}, DType::F32);
  if (for_backward || scratch == GdnScratch::States) r->Tm = alloc({r->ch.n, d.HV, C, C}, st);
  if (for_backward || r->half_states) r->vnew = alloc({d.T, d.HV, d.dv}, st);
  if (scratch != GdnScratch::None)
    r->states = alloc({r->half_states ? (r->ch.n + 1) / 2 : r->ch.n, d.HV, d.dk, d.dv}, st);
  const int nch = static_cast<int>(r->ch.n);
  const kernels::KOut ko = o ? kout(*o, "gdn o") : kernels::KOut{};
  if (!r->mma) {
    cuda_check(kernels::launch_gdn_chunk_fwd(
                   policy_, fptr(r->qn), fptr(r->kn), kin(v, "gdn v"), gates.g, gates.beta,
                   iptr(r->ch.chunks), nch, iptr(r->ch.off), nseq, ko, fptr(r->W), fptr(U), fptr(r->M),
                   fptr(r->Gc), for_backward ? fptr(r->states) : nullptr, d.HK, d.HV, d.dk, d.dv, s,
                   for_backward ? fptr(r->Tm) : nullptr, for_backward ? fptr(r->vnew) : nullptr),
               "gdn_fwd (chunked core)");
    return r;
  }
  // The scan's other bf16 operands (diag(Γ/γ)·K̂ per value head, or K̂ per key head as an image; Q̂) are needed
  // only between the two kernels.
  Tensor Kdb = image ? alloc({r->ch.n, d.HK, C, d.dk}, DType::BF16) : alloc({d.T, d.HV, d.dk}, DType::BF16),
         Qb;
  kernels::GdnScanBf16 b16;
  b16.W = r->W.data, b16.Kd = Kdb.data, b16.M = r->M.data, b16.image = image, b16.tokens = d.T;
  if (image) b16.U = U.data;
  if (o) {
    Qb = image ? alloc({r->ch.n, d.HK, C, d.dk}, DType::BF16) : alloc({d.T, d.HK, d.dk}, DType::BF16);
    b16.Q = Qb.data;
  }
  if (r->Tm.defined()) b16.T = r->Tm.data;
  b16.states_even = r->half_states;
  // The backward's recompute also has the prep write ρ (and, without output, for inputs that are not bf16, q̂
  // and k̂) for the backward's other kernels; so does the half-states keep, whose backward reads the kept ρ
  // (2·T·HK floats) instead of forming it again in its lean prep and odd states.
  const bool raw = gdn_reads_raw_qk(q, k);
  const kernels::GdnNormOut nout =
      gdn_norm_outputs(d, (for_backward && (!o || raw)) || r->half_states ? r.get() : nullptr, !raw);
  cuda_check(kernels::launch_gdn_chunk_prep_mma(policy_, kin(q, "gdn q"), kin(k, "gdn k"), scale, nout,
                                                kin(v, "gdn v"), gates, iptr(r->ch.chunks), nch, nullptr,
                                                image ? nullptr : fptr(U), nullptr, fptr(r->Gc), nullptr,
                                                d.HK, d.HV, d.dk, d.dv, s, &b16),
             "gdn_fwd (chunk prep)");
  cuda_check(kernels::launch_gdn_chunk_scan_mma(policy_, nullptr, nullptr, nullptr, image ? nullptr : fptr(U),
                                                nullptr, fptr(r->Gc), iptr(r->ch.chunks), iptr(r->ch.off),
                                                nseq, ko, r->states.defined() ? r->states.data : nullptr,
                                                r->vnew.defined() ? r->vnew.data : nullptr, d.HK, d.HV, d.dk,
                                                d.dv, s, &b16),
             "gdn_fwd (chunk scan)");
  return r;
}

void CudaBackend::gdn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          const SeqLayout& seq, float scale, Tensor& o) {
  const GdnDims d = gdn_dims("gdn_fwd", q, k, v, g, beta);
  check(o.numel() == v.numel(),
        [&] { return "gdn_fwd: o " + shape_str(o.shape) + " for v " + shape_str(v.shape); });
  gdn_check("gdn_fwd", d, seq);
  if (d.T == 0) return;
  gdn_forward_core(q, k, v, gate_ptrs(g, beta), seq, scale, &o, GdnScratch::None);
}

std::shared_ptr<Backend::GdnSaved> CudaBackend::gdn_fwd_keep(const Tensor& q, const Tensor& k, const Tensor& v,
                                                             const Tensor& g, const Tensor& beta,
                                                             const SeqLayout& seq, float scale, Tensor& o,
                                                             GdnKeep what) {
  const GdnDims d = gdn_dims("gdn_fwd", q, k, v, g, beta);
  if (d.T == 0 || gdn_use_recurrent(d, policy_) ||
      (what == GdnKeep::States && !gdn_mma_path(d.dk, d.dv, policy_))) {
    gdn_fwd(q, k, v, g, beta, seq, scale, o);  // nothing kept: the backward recomputes
    return nullptr;
  }
  return gdn_keep_core(q, k, v, gate_ptrs(g, beta), d, seq, scale, o, what);
}

std::shared_ptr<Backend::GdnSaved> CudaBackend::gdn_keep_core(const Tensor& q, const Tensor& k,
                                                              const Tensor& v, const kernels::GdnGates& gates,
                                                              const GdnDims& d, const SeqLayout& seq,
                                                              float scale, Tensor& o, GdnKeep what) {
  check(o.numel() == v.numel(),
        [&] { return "gdn_fwd: o " + shape_str(o.shape) + " for v " + shape_str(v.shape); });
  gdn_check("gdn_fwd", d, seq);
  auto r = gdn_forward_core(q, k, v, gates, seq, scale, &o,
                            what == GdnKeep::States ? GdnScratch::States : GdnScratch::ForBackward);
  // q̂, k̂ (fp32, 2·T·HK·dk floats) are cheaper to recompute in the backward than to keep.
  r->qn = Tensor();
  r->kn = Tensor();
  if (r->states_only) {  // the backward recomputes these chunk-parallel from the states and T (and ρ
    r->W = Tensor();     // unless the half-states keep kept it)
    r->M = Tensor();
    r->Gc = Tensor();
    if (!r->half_states) {
      r->rq = Tensor();
      r->rk = Tensor();
    }
  }
  return r;
}

kernels::GdnNormOut CudaBackend::gdn_norm_outputs(const GdnDims& d, CudaGdnSaved* r, bool values) {
  kernels::GdnNormOut n;
  n.eps = kernels::kGdnL2Eps;
  if (!r) return n;
  if (values) {
    r->qn = alloc({d.T, d.HK, d.dk}, DType::F32);
    r->kn = alloc({d.T, d.HK, d.dk}, DType::F32);
    n.qn = fptr(r->qn), n.kn = fptr(r->kn);
  }
  r->rq = alloc({d.T, d.HK}, DType::F32);
  r->rk = alloc({d.T, d.HK}, DType::F32);
  n.rq = fptr(r->rq), n.rk = fptr(r->rk);
  return n;
}

void CudaBackend::gdn_scratch_from_states(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const kernels::GdnGates& gates, float scale, const GdnDims& d,
                                          CudaGdnSaved& f) {
  constexpr int64_t C = kernels::kGdnChunk;
  // With images the reverse scan runs on wgmma; W's buffer (an image, no smaller than (T, HV, dk)) then takes
  // dW row-major as before.
  f.W = f.image ? alloc({f.ch.n, d.HV, C, d.dk}, DType::BF16) : alloc({d.T, d.HV, d.dk}, DType::BF16);
  f.M = alloc({f.ch.n, d.HV, C, C}, DType::BF16);
  f.Gc = alloc({d.T, d.HV}, DType::F32);
  kernels::GdnHalfStates half;
  if (f.half_states) {  // V' kept: the prep forms the odd chunks' states instead
    f.states_odd = alloc({std::max<int64_t>(f.ch.n / 2, 1), d.HV, d.dk, d.dv}, DType::BF16);
    half.vnew = f.vnew.data, half.odd = f.states_odd.data;
    half.chunk_off = iptr(f.ch.off), half.nseq = static_cast<int>(f.ch.off.numel() - 1);
    half.tokens = d.T;
  } else {
    f.vnew = alloc({d.T, d.HV, d.dv}, DType::BF16);
  }
  kernels::GdnScanBf16 b16;
  b16.W = f.W.data, b16.M = f.M.data, b16.T_kept = f.Tm.data, b16.image = f.image;
  kernels::GdnNormOut nout;
  if (f.half_states && f.rq.defined()) {  // ρ kept by the forward's prep
    nout.rq = fptr(f.rq), nout.rk = fptr(f.rk), nout.rho_kept = true;
  } else {
    nout = gdn_norm_outputs(d, &f, !gdn_reads_raw_qk(q, k));
  }
  cuda_check(kernels::launch_gdn_chunk_prep_mma(
                 policy_, kin(q, "gdn q"), kin(k, "gdn k"), scale, nout, kin(v, "gdn v"), gates,
                 iptr(f.ch.chunks), static_cast<int>(f.ch.n), nullptr, nullptr, nullptr, fptr(f.Gc), nullptr,
                 d.HK, d.HV, d.dk, d.dv, stream(), &b16, f.states.data, f.half_states ? nullptr : f.vnew.data,
                 f.half_states ? &half : nullptr),
             "gdn_bwd (chunk prep from the kept states)");
  f.states_only = false;
}

void CudaBackend::gdn_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                          const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
                          Tensor& dg, Tensor& dbeta) {
  gdn_bwd_saved(nullptr, dout, q, k, v, g, beta, seq, scale, dq, dk, dv, dg, dbeta);
}

void CudaBackend::gdn_bwd_saved(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& g, const Tensor& beta, const SeqLayout& seq,
                                float scale, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dg, Tensor& dbeta) {
  const GdnDims d = gdn_dims("gdn_bwd", q, k, v, g, beta);
  check(dg.numel() == g.numel() && dbeta.numel() == beta.numel(), [&] {
    return "gdn_bwd: dg " + shape_str(dg.shape) + ", dbeta " + shape_str(dbeta.shape) +
           " must match g, beta " + shape_str(g.shape);
  });
  gdn_bwd_core(saved, dout, q, k, v, gate_ptrs(g, beta), d, seq, scale, dq, dk, dv,
               GdnGateGradOut{&dg, &dbeta});
}

std::shared_ptr<Backend::GdnSaved> CudaBackend::gdn_gated_fwd(const Tensor& q, const Tensor& k,
                                                              const Tensor& v, const GdnGateInputs& gates,
                                                              const SeqLayout& seq, float scale, Tensor& o,
                                                              std::optional<GdnKeep> keep) {
  const GdnDims d = gdn_dims("gdn_fwd", q, k, v, gates);
  if (d.T == 0 || gdn_use_recurrent(d, policy_) || !gdn_mma_path(d.dk, d.dv, policy_))
    return Backend::gdn_gated_fwd(q, k, v, gates, seq, scale, o, keep);  // g and β as tensors
  if (keep) return gdn_keep_core(q, k, v, gate_ptrs(gates), d, seq, scale, o, *keep);
  check(o.numel() == v.numel(),
        [&] { return "gdn_fwd: o " + shape_str(o.shape) + " for v " + shape_str(v.shape); });
  gdn_check("gdn_fwd", d, seq);
  gdn_forward_core(q, k, v, gate_ptrs(gates), seq, scale, &o, GdnScratch::None);
  return nullptr;
}

void CudaBackend::gdn_gated_bwd(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const GdnGateInputs& gates, const SeqLayout& seq,
                                float scale, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& da, Tensor& db) {
  const GdnDims d = gdn_dims("gdn_bwd", q, k, v, gates);
  if (d.T == 0 || gdn_use_recurrent(d, policy_) || !gdn_mma_path(d.dk, d.dv, policy_))
    return Backend::gdn_gated_bwd(saved, dout, q, k, v, gates, seq, scale, dq, dk, dv, da, db);
  check(da.numel() == gates.a.numel() && db.numel() == gates.b.numel(), [&] {
    return "gdn_bwd: da " + shape_str(da.shape) + ", db " + shape_str(db.shape) + " must match a, b " +
           shape_str(gates.a.shape);
  });
  GdnGateGradOut out;
  out.da = &da, out.db = &db;
  gdn_bwd_core(saved, dout, q, k, v, gate_ptrs(gates), d, seq, scale, dq, dk, dv, out);
}

void CudaBackend::gdn_bwd_core(GdnSaved* saved, const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                               const Tensor& v_in, const kernels::GdnGates& gates, const GdnDims& d,
                               const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
                               const GdnGateGradOut& gout) {
  const Tensor dout = aligned16(dout_in), q = aligned16(q_in), k = aligned16(k_in), v = aligned16(v_in);
  check(dout.numel() == v.numel() && dq.numel() == q.numel() && dk.numel() == k.numel() &&
            dv.numel() == v.numel(),
        [&] {
          return "gdn_bwd: gradient shapes must match their inputs (dout " + shape_str(dout.shape) + ", dq " +
                 shape_str(dq.shape) + ", dk " + shape_str(dk.shape) + ", dv " + shape_str(dv.shape) + ")";
        });
  check(std::min(kernels::gdn_core_bwd_smem(d.dk, d.dv), kernels::gdn_chunk_bwd_smem(d.dk, d.dv)) <=
            policy_.smem_optin,
        [&] {
          return "gdn_bwd: key/value head dims " + std::to_string(d.dk) + "/" + std::to_string(d.dv) +
                 " exceed shared memory";
        });
  check_layout(seq, d.T, "gdn_bwd");
  if (d.T == 0) return;
  cudaStream_t s = stream();
  const int nseq = static_cast<int>(seq.num_seqs());
  // With the gate inputs (gates.a set: tensor-core path only) the WY kernel writes da, db itself; dg32 is
  // still the kernels' dg accumulator. The tensor-core WY kernel also writes dβ, and accumulates dg in the
  // output when that is F32; the other kernels take F32 scratch that is copied out at the end.
  const bool raw_gates = gates.a.p != nullptr;
  Tensor dqh, dkh, dg32, db32;
  bool dq_fused = false;  // dq written by the tensor-core backward itself
  kernels::GdnGateGrads gr;
  if (raw_gates) gr.da = kout(*gout.da, "gdn da"), gr.db = kout(*gout.db, "gdn db");
  auto gate_scratch = [&](bool dbeta) {
    dg32 = alloc({d.T, d.HV}, DType::F32);
    gr.dg = fptr(dg32);
    if (dbeta) db32 = alloc({d.T, d.HV}, DType::F32);
  };
  std::unique_ptr<CudaGdnSaved> own;
  CudaGdnSaved* f = dynamic_cast<CudaGdnSaved*>(saved);
  if (gdn_use_recurrent(d, policy_)) {
    check(!raw_gates, "internal: gdn gates formed in the core need the tensor-core path");
    gate_scratch(true);
    // The first (per-token) kernel: A/B timing, and head dims too large for the chunked kernels' tiles.
    own = gdn_forward_core(q, k, v, gates, seq, scale, nullptr, GdnScratch::None);  // only the L2 norms run
    f = own.get();
    Tensor ckpt = alloc({kernels::gdn_core_bwd_ckpt_floats(seq.host_cu_seqlens.data(), nseq, d.HV, d.dk, d.dv)},
                        DType::F32);
    // Partial sums over column groups are added atomically: zero the F32 accumulators first.
    dqh = zeros({d.T, d.HV, d.dk}, DType::F32);
    dkh = zeros({d.T, d.HV, d.dk}, DType::F32);
    fill(dg32, 0.f);
    fill(db32, 0.f);
    cuda_check(kernels::launch_gdn_core_bwd(kin(dout, "gdn dout"), fptr(f->qn), fptr(f->kn), kin(v, "gdn v"),
                                            gates.g, gates.beta, iptr(seq.cu_seqlens), nseq, fptr(dqh),
                                            fptr(dkh), kout(dv, "gdn dv"), fptr(dg32), fptr(db32), fptr(ckpt),
                                            d.HK, d.HV, d.dk, d.dv, s),
               "gdn_bwd (core)");
  } else {
    if (!f || !f->states.defined()) {  // nothing kept: recompute the forward's chunk quantities
      own = gdn_forward_core(q, k, v, gates, seq, scale, nullptr, GdnScratch::ForBackward);
      f = own.get();
    } else if (f->states_only) {
      f->image = dout.dtype == DType::BF16 && gdn_reads_raw_qk(q, k) &&
                 kernels::gdn_dscan_wgmma_selected(policy_, int64_t(nseq) * d.HV, d.dv);
      gdn_scratch_from_states(q, k, v, gates, scale, d, *f);  // the prep also writes ρ (q̂, k̂ if not bf16)
    } else if (const bool raw = f->mma && gdn_reads_raw_qk(q, k); raw ? !f->rq.defined() : !f->qn.defined()) {
      gdn_l2norms(q, k, scale, *f, !raw);
    }
    Tensor gsum = alloc({f->ch.n, d.HV}, DType::F32);
    const int nch = static_cast<int>(f->ch.n);
    if (f->mma) {
      if (raw_gates || gout.dg->dtype != DType::F32)
        gate_scratch(false);
      else
        gr.dg = fptr(*gout.dg);
      if (!raw_gates) gr.dbeta = kout(*gout.dbeta, "gdn dbeta");
      // dq̂ and the final dk̂ per value head come out in bf16 (only the L2 backward reads them), and so do the dk̂
      // partial sums between the state/intra kernel and the WY kernel.
      Tensor dh = alloc({f->ch.n, d.HV, d.dk, d.dv}, DType::BF16), dvn = alloc({d.T, d.HV, d.dv}, DType::BF16);
      Tensor dk_part = alloc({d.T, d.HV, d.dk}, DType::BF16);
      const kernels::GdnQK qk =
          gdn_reads_raw_qk(q, k)
              ? kernels::GdnQK{kin(q, "gdn q"), kin(k, "gdn k"), fptr(f->rq), fptr(f->rk), scale}
              : kernels::GdnQK{kin(f->qn, "gdn q-hat"), kin(f->kn, "gdn k-hat")};
      // The state/intra kernel finishes dq itself (the L2 backward for q) where it can, and then the backward
      // finishes dk too (the WY kernel on Hopper); the separate L2 backward below is the fallback for the
      // rest.
      dq_fused = kernels::gdn_grad_fuses_dq(qk, kin(dout, "gdn dout"), kout(dq, "gdn dq"), d.HK, d.HV);
      if (!dq_fused) dqh = alloc({d.T, d.HV, d.dk}, DType::BF16);
      dkh = alloc({d.T, d.HV, d.dk}, DType::BF16);
      kernels::GdnBwdBf16 b;
      b.W16 = f->W.data, b.M16 = f->M.data, b.T16 = f->Tm.data, b.states16 = f->states.data;
      b.vnew16 = f->vnew.data, b.dh16 = dh.data, b.dvn16 = dvn.data;
      b.dW16 = f->W.data;  // W is read only by the reverse scan, before the state products write dW
      b.dqh16 = dq_fused ? nullptr : dqh.data, b.dkh16 = dkh.data;
      if (dq_fused) b.dq = kout(dq, "gdn dq"), b.dk = kout(dk, "gdn dk");  // the backward finishes both
      b.image = f->image;
      b.states_odd16 = f->states_odd.defined() ? f->states_odd.data : nullptr;
      b.tokens = d.T;
      cuda_check(kernels::launch_gdn_chunk_bwd_mma(policy_, kin(dout, "gdn dout"), qk, kin(v, "gdn v"), gates,
                                                   iptr(f->ch.chunks), nch, iptr(f->ch.off), nseq,
                                                   fptr(f->Gc), b, fptr(gsum), dk_part.data,
                                                   kout(dv, "gdn dv"), gr, d.HK, d.HV, d.dk, d.dv, s),
                 "gdn_bwd (chunked core, tensor cores)");
    } else {
      gate_scratch(true);
      dqh = alloc({d.T, d.HV, d.dk}, DType::F32);
      dkh = alloc({d.T, d.HV, d.dk}, DType::F32);
      Tensor dh = alloc({f->ch.n, d.HV, d.dk, d.dv}, DType::F32), dvn = alloc({d.T, d.HV, d.dv}, DType::F32);
      cuda_check(kernels::launch_gdn_chunk_bwd(
                     policy_, kin(dout, "gdn dout"), fptr(f->qn), fptr(f->kn), kin(v, "gdn v"), gates.beta,
                     iptr(f->ch.chunks), nch, iptr(f->ch.off), nseq, fptr(f->W), fptr(f->M), fptr(f->Gc),
                     fptr(f->Tm), fptr(f->states), fptr(f->vnew), fptr(dh), fptr(dvn), fptr(gsum), fptr(dqh),
                     fptr(dkh), kout(dv, "gdn dv"), fptr(dg32), fptr(db32), d.HK, d.HV, d.dk, d.dv, s),
                 "gdn_bwd (chunked core)");
    }
    f->states = Tensor();  // consumed: W now holds dW
    f->states_odd = Tensor();
  }
  if (!raw_gates && dg32.defined()) copy(*gout.dg, dg32);
  if (!raw_gates && db32.defined()) copy(*gout.dbeta, db32);
  if (dq_fused) return;  // dq and dk written by the tensor-core backward itself
  const kernels::L2BwdArgs l2k{kin(dkh, "gdn dk-hat"), kin(k, "gdn k"), fptr(f->rk), 1.f, kout(dk, "gdn dk")};
  const kernels::L2BwdArgs l2q{kin(dqh, "gdn dq-hat"), kin(q, "gdn q"), fptr(f->rq), scale,
                               kout(dq, "gdn dq")};
  cuda_check(kernels::launch_l2norm_bwd_gva2(l2q, l2k, d.T, d.HK, d.HV, d.dk, s), "gdn_bwd (l2norm q, k)");
}

// ---- losses ------------------------------------------------------------------------------------------------
double CudaBackend::cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits) {
  const int64_t T = logits.rows(), V = logits.cols();
  check(labels.numel() == T && labels.dtype == DType::I32, [&] {
    return "cross_entropy: labels must be I32 [T] for logits " + shape_str(logits.shape) + ", got " +
           shape_str(labels.shape) + " " + dtype_name(labels.dtype);
  });
  kernels::KOut d{};
  if (dlogits) {
    check(dlogits->numel() == logits.numel(), [&] {
      return "cross_entropy: dlogits " + shape_str(dlogits->shape) + " for logits " + shape_str(logits.shape);
    });
    d = kout(*dlogits, "cross_entropy dlogits");
  }
  double* acc = zero_acc();
  cuda_check(kernels::launch_cross_entropy(kin(logits, "cross_entropy logits"), T, V, iptr(labels), grad_scale, nullptr,
                                           d, acc, policy_, stream()),
             "cross_entropy");
  return read_acc();
}

// Row-chunked, two GEMM passes: per chunk of n rows, the lm_head GEMM writes the whole vocabulary's logits
// (F32, about 64 Mi floats at most), one cross-entropy kernel turns each row into its loss and, with dh, its
// gradient (in the weight's type, so the dh GEMM needs no conversion), and one GEMM gives the chunk's dh.
// The [T, V] logits never exist; memory: n × V floats + n × V gradient values (LossLogits::BF16: n × V bf16
// values, the gradient written over them).
double CudaBackend::linear_cross_entropy(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                         Tensor* dh, int64_t chunk_rows, LossLogits logits) {
  linear_cross_entropy_acc(h, w, labels, grad_scale, nullptr, dh, chunk_rows, logits, zero_acc());
  return read_acc();
}

void CudaBackend::linear_cross_entropy_into(const Tensor& h, const Tensor& w, const Tensor& labels,
                                            const Tensor& grad_scale, Tensor* dh, int64_t chunk_rows,
                                            LossLogits logits, Tensor& loss_sum) {
  check(loss_sum.device == Device::CUDA && loss_sum.nbytes() == sizeof(double), [&] {
    return "linear_cross_entropy_into: loss_sum must be an 8-byte CUDA tensor, got " +
           shape_str(loss_sum.shape) + " " + dtype_name(loss_sum.dtype);
  });
  check(grad_scale.device == Device::CUDA && grad_scale.dtype == DType::F32 && grad_scale.numel() == 1, [&] {
    return "linear_cross_entropy_into: grad_scale must be a CUDA F32 [1] tensor, got " +
           shape_str(grad_scale.shape) + " " + dtype_name(grad_scale.dtype);
  });
  cuda_check(cudaMemsetAsync(loss_sum.data, 0, sizeof(double), stream()), "cudaMemsetAsync (loss)");
  linear_cross_entropy_acc(h, w, labels, 0.f, static_cast<const float*>(grad_scale.data), dh, chunk_rows, logits,
                           static_cast<double*>(loss_sum.data));
}

void CudaBackend::linear_cross_entropy_acc(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                           const float* grad_scale_dev, Tensor* dh, int64_t chunk_rows,
                                           LossLogits logits_dtype, double* acc) {
  const int64_t T = h.rows(), H = h.cols(), V = w.dim(0);
  check(w.ndim() == 2 && w.dim(1) == H && labels.numel() == T && labels.dtype == DType::I32, [&] {
    return "linear_cross_entropy: h " + shape_str(h.shape) + ", w " + shape_str(w.shape) + ", labels " +
           shape_str(labels.shape) + " (expected w [V, H], labels I32 [T])";
  });
  check(!dh || dh->numel() == h.numel(), "linear_cross_entropy: dh must match h");
  if (T == 0) return;
  // Logits buffer: 2^26 floats (256 MiB), plus the chunk's gradient in the weight's type. Under the Hopper policy
  // a bf16 gradient is written over the logits themselves (kernels::launch_cross_entropy_bf16_in_place) and the
  // dh GEMM reads it with a leading dimension of 2V: the same bytes then hold 1.5 times the rows (384 instead of
  // 256 at Qwen3.5's vocabulary), so fewer, larger chunks' GEMMs read the lm_head weight (1 GB at 2b).
  constexpr int log2_floats = 26;
  const int64_t cap_rows = std::max<int64_t>(1, (int64_t(1) << log2_floats) / std::max<int64_t>(V, 1));
  const int64_t cap16 = cap_rows >= 32 ? cap_rows / 16 * 16 : cap_rows;
  if (logits_dtype == LossLogits::BF16 && w.dtype == DType::BF16) {
    // bf16 logits: the F32 form's bytes (cap16 rows of F32 logits and their bf16 gradient, 6 bytes a value) hold
    // 3 × cap16 rows (768 at Qwen3.5's vocabulary; deltatune/model_info.h's estimate counts rows × V × 2).
    linear_cross_entropy_bf16_logits(h, w, labels, grad_scale, grad_scale_dev, dh,
                                     std::max<int64_t>(1, std::min({chunk_rows, T, 3 * cap16})), acc);
    return;
  }
  const bool in_place = dh && w.dtype == DType::BF16 && kernels::cross_entropy_bf16_in_place(policy_, V);
  const int64_t n_max = std::max<int64_t>(1, std::min({chunk_rows, T, in_place ? cap16 * 3 / 2 : cap16}));
  Tensor logits = alloc({n_max, V}, DType::F32);
  Tensor grad = dh && !in_place ? alloc({n_max, V}, w.dtype) : Tensor();
  const Tensor h2 = h.view({T, H});
  for (int64_t t0 = 0; t0 < T; t0 += n_max) {
    const int64_t n = std::min(n_max, T - t0);
    Tensor lg = logits.slice(0, n), gr = dh && !in_place ? grad.slice(0, n) : Tensor();
    gemm(h2.slice(t0, t0 + n), false, w, true, lg, 1.f, 0.f);
    const int32_t* lab = iptr(labels.view({T}).slice(t0, t0 + n));
    if (in_place) {
      cuda_check(kernels::launch_cross_entropy_bf16_in_place(static_cast<float*>(lg.data), n, V, lab, grad_scale,
                                                             grad_scale_dev, acc, policy_, stream()),
                 "linear_cross_entropy (gradient over the logits)");
      Tensor gv = lg;  // the chunk's F32 rows as bf16 [n, 2V]: the gradient is columns [0, V)
      gv.dtype = DType::BF16;
      gv.shape = {n, 2 * V};
      Tensor dhc = dh->view({T, H}).slice(t0, t0 + n);
      gemm_cols(Cols(gv, 0, V), false, Cols(w), false, Cols(dhc), 1.f, 0.f);
      continue;
    }
    cuda_check(kernels::launch_cross_entropy(kin(lg, "linear_cross_entropy logits"), n, V, lab, grad_scale,
                                             grad_scale_dev, dh ? kout(gr, "linear_cross_entropy grad") : kernels::KOut{},
                                             acc, policy_, stream()),
               "linear_cross_entropy");
    if (!dh) continue;
    Tensor dhc = dh->view({T, H}).slice(t0, t0 + n);
    gemm(gr, false, w, false, dhc, 1.f, 0.f);
  }
}

// bf16 logits (LossLogits::BF16), as HF and Liger form them: per chunk the lm_head GEMM writes bf16 logits, the
// cross-entropy reads them with fp32 math and writes its bf16 gradient over them (under the Hopper policy the bf16
// cluster kernel: 8 logits a 16-byte load), and the dh GEMM reads that gradient as a plain [n, V] operand. Half the
// bytes of F32 logits per row: measured on the 2b loss (H200, session 33 ce36-lab) at 768 rows a chunk the loss
// path took 12.93 ms against 14.25 for F32 logits (fewer reads of the lm_head weight, half the logits written and
// read); at 384 rows 13.53 ms in half the memory.
void CudaBackend::linear_cross_entropy_bf16_logits(const Tensor& h, const Tensor& w, const Tensor& labels,
                                                   float grad_scale, const float* grad_scale_dev, Tensor* dh,
                                                   int64_t rows, double* acc) {
  const int64_t T = h.rows(), H = h.cols(), V = w.dim(0);
  Tensor logits = alloc({rows, V}, DType::BF16);
  const Tensor h2 = h.view({T, H});
  for (int64_t t0 = 0; t0 < T; t0 += rows) {
    const int64_t n = std::min(rows, T - t0);
    Tensor lg = logits.slice(0, n);
    gemm(h2.slice(t0, t0 + n), false, w, true, lg, 1.f, 0.f);
    const int32_t* lab = iptr(labels.view({T}).slice(t0, t0 + n));
    cuda_check(kernels::launch_cross_entropy(kin(lg, "linear_cross_entropy logits"), n, V, lab, grad_scale,
                                             grad_scale_dev,
                                             dh ? kout(lg, "linear_cross_entropy grad") : kernels::KOut{}, acc,
                                             policy_, stream()),
               "linear_cross_entropy (bf16 logits)");
    if (!dh) continue;
    Tensor dhc = dh->view({T, H}).slice(t0, t0 + n);
    gemm(lg, false, w, false, dhc, 1.f, 0.f);
  }
}

// The prompt's GDN pass of generation: the chunked forward keeps every chunk's start state (bf16 on the
// tensor-core path, as the scan's own), and the per-token recurrence runs from the last chunk's start state over
// that chunk's tokens (at most kGdnChunk per sequence) to leave the final state in fp32. Its outputs for those
// tokens go to scratch: o is the chunked forward's.
void CudaBackend::gdn_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                              const SeqLayout& seq, float scale, Tensor& state, Tensor& o) {
  const GdnDims d = gdn_dims("gdn_prefill", q, k, v, g, beta);
  const int64_t N = seq.num_seqs();
  check(o.numel() == v.numel(),
        [&] { return "gdn_prefill: o " + shape_str(o.shape) + " for v " + shape_str(v.shape); });
  check(state.dtype == DType::F32 && state.numel() == N * d.HV * d.dk * d.dv, [&] {
    return "gdn_prefill: state must be F32 [N, HV, dk, dv] = [" + std::to_string(N) + ", " +
           std::to_string(d.HV) + ", " + std::to_string(d.dk) + ", " + std::to_string(d.dv) + "], got " +
           dtype_name(state.dtype) + " " + shape_str(state.shape);
  });
  gdn_check("gdn_prefill", d, seq);
  const auto& cu = seq.host_cu_seqlens;
  bool empty_seq = false;
  for (int64_t n = 0; n < N; ++n) empty_seq |= cu[n + 1] == cu[n];
  // No chunk states to start from, or fp32 inputs (the F32 diagnostic backend) where the chunk states would be
  // bf16 (tensor-core path): the per-token recurrence from a zero state.
  const bool fp32_inputs = q.dtype == DType::F32 || k.dtype == DType::F32 || v.dtype == DType::F32;
  if (d.T == 0 || empty_seq || gdn_use_recurrent(d, policy_) || (fp32_inputs && gdn_mma_path(d.dk, d.dv, policy_))) {
    Backend::gdn_prefill(q, k, v, g, beta, seq, scale, state, o);
    return;
  }
  const std::unique_ptr<CudaGdnSaved> r =
      gdn_forward_core(q, k, v, gate_ptrs(g, beta), seq, scale, &o, GdnScratch::ForBackward);
  check(r->states.defined() && !r->half_states && r->states.dim(0) == r->ch.n,
        "internal: gdn_prefill found no chunk-start states");
  // Each sequence's last chunk: its index in the chunk list (chunks of kGdnChunk tokens from each sequence's
  // start) and its tokens, packed.
  std::vector<int32_t> last_chunk, rows, tail_cu{0}, tail_pos;
  int32_t chunks = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t len = cu[n + 1] - cu[n], nc = (len + kernels::kGdnChunk - 1) / kernels::kGdnChunk;
    chunks += nc;
    last_chunk.push_back(chunks - 1);
    const int32_t t0 = cu[n] + (nc - 1) * kernels::kGdnChunk;
    for (int32_t t = t0; t < cu[n + 1]; ++t) {
      rows.push_back(t);
      tail_pos.push_back(t - cu[n]);
    }
    tail_cu.push_back(static_cast<int32_t>(rows.size()));
  }
  check(chunks == r->ch.n, [&] {
    return "internal: gdn_prefill chunk count " + std::to_string(chunks) + " != " + std::to_string(r->ch.n);
  });
  const int64_t S = d.HV * d.dk * d.dv, Tt = static_cast<int64_t>(rows.size());
  Tensor state2 = state.view({N, S});
  gather_rows(r->states.view({r->ch.n, S}), upload_i32(last_chunk), state2);  // bf16 -> fp32 where bf16
  SeqLayout tail;
  tail.host_cu_seqlens = tail_cu;
  tail.cu_seqlens = upload_i32(tail_cu);
  tail.positions = upload_i32(tail_pos);
  for (int64_t n = 0; n < N; ++n) tail.max_seqlen = std::max(tail.max_seqlen, tail_cu[n + 1] - tail_cu[n]);
  const Tensor rows_dev = upload_i32(rows);
  auto pick = [&](const Tensor& x, int64_t width) {
    Tensor out = alloc({Tt, width}, x.dtype);
    gather_rows(x.view({d.T, width}), rows_dev, out);
    return out;
  };
  const Tensor qt = pick(q, d.HK * d.dk), kt = pick(k, d.HK * d.dk), vt = pick(v, d.HV * d.dv),
               gt = pick(g, d.HV), bt = pick(beta, d.HV);
  Tensor ot = alloc({Tt, d.HV, d.dv}, o.dtype);
  gdn_recurrent(qt.view({Tt, d.HK, d.dk}), kt.view({Tt, d.HK, d.dk}), vt.view({Tt, d.HV, d.dv}), gt, bt, tail, scale,
                state, ot);
}

}  // namespace deltatune::cuda
