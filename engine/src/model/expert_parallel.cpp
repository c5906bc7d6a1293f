#include "model/expert_parallel.h"

#include "core/error.h"
#include "model/expert_parallel_plan.h"

namespace deltatune {

namespace {

std::vector<int64_t> times(std::vector<int64_t> rows, int64_t bytes_per_row) {
  for (auto& r : rows) r *= bytes_per_row;
  return rows;
}


}  // namespace

Tensor expert_parallel_fwd(Backend& be, TokenExchange& ex, const ModelConfig& cfg, const Tensor& x, const Tensor& idx,
                           const Tensor& w, const Tensor& gate_up, const Tensor& down) {
  const int64_t T = x.rows(), H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k, Ie = cfg.moe_intermediate;
  const int64_t M = T * K;
  const DType dt = be.compute_dtype();
  check(ex.world() >= 1 && E % ex.world() == 0 && gate_up.dim(0) == E / ex.world() && down.dim(0) == E / ex.world(),
        "internal: expert parallel: " + std::to_string(E) + " experts over " + std::to_string(ex.world()) +
            " ranks with local weights " + shape_str(gate_up.shape) + " / " + shape_str(down.shape));
  // Dispatch order: the T·K rows sorted by expert, so each rank's experts are one contiguous range.
  Tensor offsets = be.alloc({E + 1}, DType::I32), row_token = be.alloc({M}, DType::I32);
  Tensor row_slot = be.alloc({M}, DType::I32), slot_row = be.alloc({M}, DType::I32);
  be.moe_dispatch(idx, static_cast<int>(E), offsets, row_token, row_slot, slot_row, nullptr);
  Tensor xe = be.alloc({M, H}, dt);
  be.gather_rows(x, row_token, xe);
  // The one host sync of the layer: the sizes of the exchange.
  const Tensor off = be.download(offsets, DType::I32);
  std::vector<int64_t> mine(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) mine[static_cast<size_t>(e)] = off.ptr<int32_t>()[e + 1] - off.ptr<int32_t>()[e];
  const ExpertExchangePlan p = plan_expert_exchange(ex.all_gather_counts(mine), ex.rank());

  const int64_t row = H * static_cast<int64_t>(dtype_size(dt));
  const int64_t R = static_cast<int64_t>(p.expert_major.size());
  Tensor recv = be.alloc({R, H}, dt);
  ex.all_to_all(xe.data, times(p.send_rows, row), recv.data, times(p.recv_rows, row));
  // Source-major -> expert-major for the grouped GEMMs, and back afterwards.
  std::vector<int32_t> back(p.expert_major.size());
  for (size_t j = 0; j < p.expert_major.size(); ++j) back[static_cast<size_t>(p.expert_major[j])] = static_cast<int32_t>(j);
  const Tensor to_local = be.upload_i32(p.expert_major), to_source = be.upload_i32(back);
  const Tensor local_off = be.upload_i32(p.local_offsets);
  Tensor xl = be.alloc({R, H}, dt);
  if (R) be.gather_rows(recv, to_local, xl);
  Tensor gu = be.alloc({R, 2 * Ie}, dt), g = be.alloc({R, Ie}, dt), u = be.alloc({R, Ie}, dt);
  be.grouped_gemm(xl, gate_up, true, local_off, gu, 1.f, 0.f);
  be.copy_cols(g, 0, gu, 0, Ie);
  be.copy_cols(u, 0, gu, Ie, Ie);
  Tensor h = be.alloc({R, Ie}, dt), yl = be.alloc({R, H}, dt);
  be.swiglu_fwd(g, u, h);
  be.grouped_gemm(h, down, true, local_off, yl, 1.f, 0.f);
  Tensor ys = be.alloc({R, H}, dt);
  if (R) be.gather_rows(yl, to_source, ys);
  Tensor ye = be.alloc({M, H}, dt);
  ex.all_to_all(ys.data, times(p.recv_rows, row), ye.data, times(p.send_rows, row));
  Tensor out = be.alloc({T, H}, dt);
  be.moe_combine(ye, slot_row, w, out);
  return out;
}

}  // namespace deltatune
