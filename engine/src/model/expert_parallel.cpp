#include "model/expert_parallel.h"

#include "core/error.h"
#include "model/expert_parallel_plan.h"

namespace deltatune {

namespace {

std::vector<int64_t> times(std::vector<int64_t> rows, int64_t bytes_per_row) {
  for (auto& r : rows) r *= bytes_per_row;
  return rows;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

// rows [n, H]: send_rows[d] consecutive rows to each rank d into out (recv_rows[s] rows from each rank s,
// sources in rank order). In flight until the exchange's next join().
void send_rows(TokenExchange& ex, const Tensor& rows, const std::vector<int64_t>& send, const Tensor& out,
               const std::vector<int64_t>& recv) {
  const int64_t row = rows.dim(1) * static_cast<int64_t>(dtype_size(rows.dtype));
  ex.all_to_all(rows.data, times(send, row), out.data, times(recv, row));
}

void plan(const BlockContext& c, MoeCache& k) {
  Backend& be = c.be;
  TokenExchange& ex = *c.ep;
  const int64_t E = c.cfg.num_experts;
  const std::vector<std::vector<int32_t>> offsets = ex.gather_offsets_wait();
  std::vector<std::vector<int64_t>> counts;
  for (const auto& off : offsets) {
    check(static_cast<int64_t>(off.size()) == E + 1, "internal: expert parallel: offsets of another length");
    counts.emplace_back(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) counts.back()[static_cast<size_t>(e)] = off[static_cast<size_t>(e + 1)] - off[static_cast<size_t>(e)];
  }
  const ExpertExchangePlan p = plan_expert_exchange(counts, ex.rank());
  ExpertParallelCache& q = k.ep;
  q.send_rows = p.send_rows;
  q.recv_rows = p.recv_rows;
  // Source-major -> expert-major for the grouped GEMMs, and back afterwards.
  std::vector<int32_t> back(p.expert_major.size());
  for (size_t j = 0; j < p.expert_major.size(); ++j) back[static_cast<size_t>(p.expert_major[j])] = static_cast<int32_t>(j);
  q.local_off = be.upload_i32(p.local_offsets);
  if (!p.expert_major.empty()) {
    q.to_local = be.upload_i32(p.expert_major);
    q.to_source = be.upload_i32(back);
  }
  q.planned = true;
}

// This rank's slice of the layer's experts, and the rows the other ranks sent it.
struct LocalExperts {
  int64_t H, Ie, El;
  DType dt;
  Tensor recv;  // [R, H] source-major; reused for the outputs that travel back
  int64_t R;
};

// Waits for the rows in flight and takes them; releases the rows this rank sent (no longer read).
LocalExperts receive(const BlockContext& c, Tensor& in_flight, Tensor& sent) {
  c.ep->join();
  sent = Tensor{};
  LocalExperts x{c.cfg.hidden_size, c.cfg.moe_intermediate, c.cfg.num_experts / c.ep->world(),
                 c.be.compute_dtype(), std::move(in_flight), 0};
  x.R = x.recv.rows();
  return x;
}

// The experts' rows (source-major in x.recv) back to the ranks that sent them; returns this rank's [T·K, H] in
// dispatch order.
Tensor send_back(const BlockContext& c, const ExpertParallelCache& q, const LocalExperts& x) {
  Tensor out = c.be.alloc({sum(q.send_rows), x.H}, x.dt);
  send_rows(*c.ep, x.recv, q.recv_rows, out, q.send_rows);
  c.ep->join();
  return out;
}

}  // namespace

void expert_parallel_route(const BlockContext& c, MoeCache& k) {
  check(c.cfg.num_experts % c.ep->world() == 0, "expert parallel: " + std::to_string(c.cfg.num_experts) +
                                                    " experts do not divide over " + std::to_string(c.ep->world()) +
                                                    " GPUs");
  if (!k.ep.planned) c.ep->gather_offsets_start(k.offsets.data, c.cfg.num_experts + 1);
}

void expert_parallel_send(const BlockContext& c, MoeCache& k) {
  ExpertParallelCache& q = k.ep;
  if (q.planned)
    c.ep->pace();
  else
    plan(c, k);
  q.recv = c.be.alloc({sum(q.recv_rows), c.cfg.hidden_size}, c.be.compute_dtype());
  send_rows(*c.ep, k.xe, q.send_rows, q.recv, q.recv_rows);
}

Tensor expert_parallel_rows_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, MoeCache& k) {
  Backend& be = c.be;
  ExpertParallelCache& q = k.ep;
  LocalExperts x = receive(c, q.recv, k.xe);  // the backward reads the received rows (q.xl), not k.xe
  const int64_t R = x.R, H = x.H, Ie = x.Ie;
  q.xl = be.alloc({R, H}, x.dt);
  k.gu = be.alloc({R, 2 * Ie}, x.dt);
  k.h = be.alloc({R, Ie}, x.dt);
  if (R) {
    Tensor yl = be.alloc({R, H}, x.dt);
    be.gather_rows(x.recv, q.to_local, q.xl);
    grouped_linear_fwd(be, q.xl, expert_weights(be, w.experts_gate_up, x.El, 2 * Ie, H), l.ex_gate_up, c.rt,
                       c.salt(16), q.local_off, k.gu, k.lgu);
    be.swiglu_packed_fwd(k.gu, k.h);
    grouped_linear_fwd(be, k.h, expert_weights(be, w.experts_down, x.El, H, Ie), l.ex_down, c.rt, c.salt(48),
                       q.local_off, yl, k.ld);
    be.gather_rows(yl, q.to_source, x.recv);  // back to source-major, in the receive buffer
  }
  return send_back(c, q, x);
}

ExpertParallelGradFlight expert_parallel_send_grad(const BlockContext& c, const Tensor& dye, const MoeCache& k) {
  const ExpertParallelCache& q = k.ep;
  check(q.planned, "internal: expert parallel backward of a layer without a forward");
  c.ep->pace();
  ExpertParallelGradFlight f{dye, c.be.alloc({sum(q.recv_rows), c.cfg.hidden_size}, c.be.compute_dtype())};
  send_rows(*c.ep, f.dye, q.send_rows, f.recv, q.recv_rows);
  return f;
}

Tensor expert_parallel_rows_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                                ExpertParallelGradFlight f, const MoeCache& k) {
  Backend& be = c.be;
  const ExpertParallelCache& q = k.ep;
  LocalExperts x = receive(c, f.recv, f.dye);
  const int64_t R = x.R, H = x.H, Ie = x.Ie;
  if (R) {
    Tensor dyl = be.alloc({R, H}, x.dt);
    be.gather_rows(x.recv, q.to_local, dyl);
    Tensor dh = be.alloc({R, Ie}, x.dt);
    grouped_linear_bwd(be, dyl, expert_weights(be, w.experts_down, x.El, H, Ie), l.ex_down, c.rt, c.salt(48),
                       q.local_off, k.h, k.ld, dh);
    dyl = Tensor{};
    Tensor dgu = be.alloc({R, 2 * Ie}, x.dt);
    be.swiglu_packed_bwd(dh, k.gu, dgu);
    dh = Tensor{};
    Tensor dxl = be.alloc({R, H}, x.dt);
    grouped_linear_bwd(be, dgu, expert_weights(be, w.experts_gate_up, x.El, 2 * Ie, H), l.ex_gate_up, c.rt,
                       c.salt(16), q.local_off, q.xl, k.lgu, dxl);
    be.gather_rows(dxl, q.to_source, x.recv);
  }
  return send_back(c, q, x);
}

}  // namespace deltatune
