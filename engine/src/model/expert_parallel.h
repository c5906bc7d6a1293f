// The routed experts of one MoE layer run expert parallel (design: model/expert_parallel_plan.h): this rank's
// dispatch rows travel to the ranks holding their experts, each rank runs its experts (frozen weights and LoRA
// slices [E/N, ...]) on the rows every rank sent it, and the outputs travel back; the backward does the same with
// the output gradients. Called by moe_block_fwd / moe_block_bwd when BlockContext::ep is set; collectives over
// the exchange: every rank calls them for the same layers in the same order.
#pragma once
#include "model/blocks.h"

namespace deltatune {

// k: the layer's cache after moe_dispatch and the gather of k.xe (this rank's T·K rows in dispatch order, all E
// experts). Returns ye [T·K, H] in that order (the experts' outputs, LoRA included); fills k.ep, k.g, k.u, k.h,
// k.lgu, k.ld for the received rows and releases k.xe (the backward reads k.ep.xl).
Tensor expert_parallel_rows_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, MoeCache& k);
// dye [T·K, H]: gradient of ye. Returns dxe [T·K, H] (gradient of k.xe); the local experts' LoRA gradients (+=)
// get the contributions of every rank's rows.
Tensor expert_parallel_rows_bwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l,
                                const Tensor& dye, const MoeCache& k);

}  // namespace deltatune
