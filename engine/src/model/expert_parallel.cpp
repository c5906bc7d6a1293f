#include "model/expert_parallel.h"

#include "core/error.h"
#include "model/expert_parallel_plan.h"

namespace deltatune {

namespace {

std::vector<int64_t> times(std::vector<int64_t> rows, int64_t bytes_per_row) {
  for (auto& r : rows) r *= bytes_per_row;
  return rows;
}

// rows [n, H]: send_rows[d] consecutive rows to each rank d; returns the rows received, recv_rows[s] from each
// rank s, sources in rank order.
Tensor exchange_rows(Backend& be, TokenExchange& ex, const Tensor& rows, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows) {
  int64_t n = 0;
  for (int64_t r : recv_rows) n += r;
  const int64_t H = rows.dim(1);
  Tensor out = be.alloc({n, H}, rows.dtype);
  const int64_t row = H * static_cast<int64_t>(dtype_size(rows.dtype));
  ex.all_to_all(rows.data, times(send_rows, row), out.data, times(recv_rows, row));
  return out;
}

}  // namespace

Tensor expert_parallel_rows_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, MoeCache& k) {
  Backend& be = c.be;
  TokenExchange& ex = *c.ep;
  const auto& cfg = c.cfg;
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, Ie = cfg.moe_intermediate;
  const int64_t El = E / ex.world();
  const DType dt = be.compute_dtype();
  check(E % ex.world() == 0, "expert parallel: " + std::to_string(E) + " experts do not divide over " +
                                 std::to_string(ex.world()) + " GPUs");
  // The one host sync of the layer: the sizes of the exchange.
  const Tensor off = be.download(k.offsets, DType::I32);
  std::vector<int64_t> mine(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) mine[static_cast<size_t>(e)] = off.ptr<int32_t>()[e + 1] - off.ptr<int32_t>()[e];
  const ExpertExchangePlan p = plan_expert_exchange(ex.all_gather_counts(mine), ex.rank());
  ExpertParallelCache& q = k.ep;
  q.send_rows = p.send_rows;
  q.recv_rows = p.recv_rows;
  const int64_t R = static_cast<int64_t>(p.expert_major.size());
  Tensor recv = exchange_rows(be, ex, k.xe, q.send_rows, q.recv_rows);
  k.xe = Tensor{};  // the received rows are what the backward reads
  // Source-major -> expert-major for the grouped GEMMs, and back afterwards.
  std::vector<int32_t> back(p.expert_major.size());
  for (size_t j = 0; j < p.expert_major.size(); ++j) back[static_cast<size_t>(p.expert_major[j])] = static_cast<int32_t>(j);
  q.local_off = be.upload_i32(p.local_offsets);
  q.xl = be.alloc({R, H}, dt);
  k.g = be.alloc({R, Ie}, dt);
  k.u = be.alloc({R, Ie}, dt);
  k.h = be.alloc({R, Ie}, dt);
  Tensor yl = be.alloc({R, H}, dt);
  if (R) {
    q.to_local = be.upload_i32(p.expert_major);
    q.to_source = be.upload_i32(back);
    be.gather_rows(recv, q.to_local, q.xl);
    Tensor gu = be.alloc({R, 2 * Ie}, dt);
    grouped_linear_fwd(be, q.xl, expert_weights(be, w.experts_gate_up, El, 2 * Ie, H), l.ex_gate_up, c.rt,
                       c.salt(16), q.local_off, gu, k.lgu);
    be.copy_cols(k.g, 0, gu, 0, Ie);
    be.copy_cols(k.u, 0, gu, Ie, Ie);
    be.swiglu_fwd(k.g, k.u, k.h);
    grouped_linear_fwd(be, k.h, expert_weights(be, w.experts_down, El, H, Ie), l.ex_down, c.rt, c.salt(48),
                       q.local_off, yl, k.ld);
    be.gather_rows(yl, q.to_source, recv);  // back to source-major, in the receive buffer
  }
  return exchange_rows(be, ex, recv, q.recv_rows, q.send_rows);
}

Tensor expert_parallel_rows_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                                const Tensor& dye, const MoeCache& k) {
  Backend& be = c.be;
  TokenExchange& ex = *c.ep;
  const auto& cfg = c.cfg;
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, Ie = cfg.moe_intermediate;
  const int64_t El = E / ex.world();
  const DType dt = be.compute_dtype();
  const ExpertParallelCache& q = k.ep;
  Tensor recv = exchange_rows(be, ex, dye, q.send_rows, q.recv_rows);
  const int64_t R = recv.rows();
  if (R) {
    Tensor dyl = be.alloc({R, H}, dt);
    be.gather_rows(recv, q.to_local, dyl);
    Tensor dh = be.alloc({R, Ie}, dt);
    grouped_linear_bwd(be, dyl, expert_weights(be, w.experts_down, El, H, Ie), l.ex_down, c.rt, c.salt(48),
                       q.local_off, k.h, k.ld, dh);
    dyl = Tensor{};
    Tensor dg = be.alloc({R, Ie}, dt), du = be.alloc({R, Ie}, dt);
    be.swiglu_bwd(dh, k.g, k.u, dg, du);
    dh = Tensor{};
    Tensor dgu = be.alloc({R, 2 * Ie}, dt);
    be.copy_cols(dgu, 0, dg, 0, Ie);
    be.copy_cols(dgu, Ie, du, 0, Ie);
    dg = du = Tensor{};
    Tensor dxl = be.alloc({R, H}, dt);
    grouped_linear_bwd(be, dgu, expert_weights(be, w.experts_gate_up, El, 2 * Ie, H), l.ex_gate_up, c.rt,
                       c.salt(16), q.local_off, q.xl, k.lgu, dxl);
    be.gather_rows(dxl, q.to_source, recv);
  }
  return exchange_rows(be, ex, recv, q.recv_rows, q.send_rows);
}

}  // namespace deltatune
