// The routed experts of one MoE layer run expert parallel (design: model/expert_parallel_plan.h): this rank's
// dispatch rows travel to the ranks holding their experts, each rank runs its experts (frozen weights and LoRA
// slices [E/N, ...]) on the rows every rank sent it, and the outputs travel back; the backward does the same with
// the output gradients. Called by moe_block_fwd / moe_block_bwd when BlockContext::ep is set; collectives over
// the exchange: every rank calls them for the same layers in the same order.
//
// Split in steps so that the shared expert runs while the exchange is in flight (moe_block.cpp): the forward is
// expert_parallel_route (after moe_dispatch: starts the offsets gather, unless the layer's exchange is already
// planned: a recompute reuses the first forward's routing and plan), expert_parallel_send (plans on the host if
// needed: the layer's one host wait; sends k.xe), then expert_parallel_rows_fwd; the backward is
// expert_parallel_send_grad, then expert_parallel_rows_bwd.
#pragma once
#include "model/blocks.h"

namespace deltatune {

void expert_parallel_route(const BlockContext& c, MoeCache& k);
// k.xe: this rank's T·K rows in dispatch order (all E experts).
void expert_parallel_send(const BlockContext& c, MoeCache& k);
// Returns ye [T·K, H] in dispatch order (the experts' outputs, LoRA included); fills k.g, k.u, k.h, k.lgu, k.ld
// and k.ep.xl for the received rows and releases k.xe (the backward reads k.ep.xl).
Tensor expert_parallel_rows_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, MoeCache& k);

// The gradient rows in flight to the experts' ranks.
struct ExpertParallelGradFlight {
  Tensor dye, recv;
};
// dye [T·K, H]: gradient of ye.
ExpertParallelGradFlight expert_parallel_send_grad(const BlockContext& c, const Tensor& dye, const MoeCache& k);
// Returns dxe [T·K, H] (gradient of k.xe); the local experts' LoRA gradients (+=) get the contributions of every
// rank's rows.
Tensor expert_parallel_rows_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                                ExpertParallelGradFlight f, const MoeCache& k);

}  // namespace deltatune
