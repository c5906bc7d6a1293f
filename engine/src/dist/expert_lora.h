// Expert parallel's adapter (model/expert_parallel_plan.h): each rank holds the LoRA of its own experts only,
// [r·E/N, (r+1)·E/N) of every `experts` module, in the same PEFT layout as the full module with E/N experts
// (A [r·E/N, in]: expert-major rows; B [out, r·E/N]: column k·E/N + e) on the host, and on the backend as any
// expert module (B-shaped tensors [E/N, out, r]: lora/lora_b_layout.h). Its gradient is complete on that rank
// (every rank's rows of those experts reach it), so it is never summed over the ranks; a checkpoint or the
// exported adapter joins the slices back into the full module (one standard PEFT adapter).
#pragma once
#include <vector>

#include "backend/backend.h"
#include "lora/lora.h"

namespace deltatune {

// An expert module on the host (F32 A, B and the AdamW moments where defined) -> the slice of `rank` of
// `world`. Throws Error when the experts do not divide over the ranks.
LoraModule expert_lora_slice(const LoraModule& host, int rank, int world);
// The slices of every rank (rank order, on the host) -> the full module (moments where every slice has them).
LoraModule expert_lora_join(const std::vector<LoraModule>& slices);

// On the host, before the adapter goes to the backend (lora_to_backend): every expert module of `host` becomes
// the slice of `rank` (A, B and the moments where defined), so no GPU ever holds another rank's expert LoRA.
// Other modules stay as they are. A worker of a run gets rank 0's slices (DataParallel::scatter_expert_lora).
void expert_lora_keep_slice(LoraAdapter& host, int rank, int world);

// Whether a module is an expert module (its LoRA is split over the ranks under expert parallel).
inline bool is_expert_lora(const LoraModule& m) { return m.experts > 0; }

}  // namespace deltatune
