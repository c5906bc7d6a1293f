// Expert parallel for MoE layers (the shard plan's `expert_parallel` layouts, deltatune/shard_plan.h): the
// exchange plan of one layer (model/expert_parallel.h runs it).
//
// Design. N ranks (data-parallel workers, each with its own micro-batch); rank r holds experts
// [r·E/N, (r+1)·E/N) of every MoE layer (their frozen gate_up / down and their LoRA slices) and everything else
// replicated (or sharded: expert_parallel_sharded). Per MoE layer and micro-batch:
//   forward   router + top-k on the rank's own tokens (replicated router) -> moe_dispatch sorts the T·K rows by
//             expert, so the rows of rank d's experts are one contiguous range -> every rank's expert offsets
//             (E+1 integers) go to every rank (an all-gather from the device; the one device->host wait of the
//             layer, while the shared expert computes) -> the
//             rows travel to their experts' rank (all-to-all: ncclSend/ncclRecv in one group) -> the owner
//             regroups what it received from source-major into expert-major order (one gather_rows) and runs
//             the grouped GEMMs, SwiGLU and expert LoRA of its experts -> the outputs go back the same way ->
//             moe_combine with the router weights as now.
//   backward  the same exchange for dy (owner computes dx rows and its experts' LoRA gradients from every
//             rank's tokens), dx rows back.
//   LoRA      an expert's LoRA gradient is complete on its owner (it saw every rank's rows): it is not summed
//             over the ranks; the optimizer steps each rank's slice; a checkpoint or the exported adapter
//             gathers the slices once (export unchanged: one standard PEFT adapter).
//   load      router statistics stay per rank over all E experts (the router is replicated) and are summed
//             over the ranks as in data parallel.
//   bytes     per layer and micro-batch a rank sends T·K·(N-1)/N rows of H (bf16) each way, twice with the
//             backward: what the plan's moved_per_micro_batch counts against the sharded layout's gathers.
//   syncs     one host wait per MoE layer and step: the offsets of its first forward (the exchange sizes come
//             from the routing); the all-to-alls are stream-ordered, a checkpointed layer's recompute reuses the
//             first forward's routing and plan, and the backward reuses the plan (backend/token_exchange.h).
#pragma once
#include <cstdint>
#include <vector>

namespace deltatune {

struct ExpertExchangePlan {
  int64_t experts_per_rank = 0, first_expert = 0;  // this rank's experts: [first, first + per_rank)
  std::vector<int64_t> send_rows;  // per destination rank: rows of the dispatch order sent there (in rank order,
                                   // which is the dispatch order's own: experts ascend)
  std::vector<int64_t> recv_rows;  // per source rank: rows received from it (sources in rank order)
  // Received rows arrive source-major (then expert, then the source's dispatch order). expert_major[j] is the
  // received row that goes to position j of the expert-major order (expert, then source, then dispatch order)
  // that the grouped GEMMs read; local_offsets [experts_per_rank + 1] bound each local expert's rows there.
  std::vector<int32_t> expert_major;
  std::vector<int32_t> local_offsets;
};

// counts[s][e]: rows rank s routes to expert e this layer (every rank's, from the host exchange). E must divide
// by the world. Throws Error when the counts are not world x E or E does not divide.
ExpertExchangePlan plan_expert_exchange(const std::vector<std::vector<int64_t>>& counts, int rank);

}  // namespace deltatune
