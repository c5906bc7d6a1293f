// The routed experts of one MoE layer run expert parallel (design: model/expert_parallel_plan.h). Forward only
// and without expert LoRA so far; not wired into the model yet.
#pragma once
#include "backend/backend.h"
#include "backend/token_exchange.h"
#include "io/model_config.h"

namespace deltatune {

// x [T, H]: this rank's tokens; idx I32 [T, K] / w F32 [T, K]: their router choice (moe_router_fwd). gate_up
// [E/N, 2·Ie, H] and down [E/N, H, Ie]: this rank's experts (rank r holds [r·E/N, (r+1)·E/N)). Returns the
// routed experts' output [T, H] (Σ_j w[t, j]·expert_{idx[t, j]}(x[t])), what moe_block_fwd adds before the
// shared expert. A collective over `ex`: every rank calls it for the same layer.
Tensor expert_parallel_fwd(Backend& be, TokenExchange& ex, const ModelConfig& cfg, const Tensor& x, const Tensor& idx,
                           const Tensor& w, const Tensor& gate_up, const Tensor& down);

}  // namespace deltatune
