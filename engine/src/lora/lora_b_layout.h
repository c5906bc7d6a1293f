// Where an expert module's B lives in which layout. On the backend (after lora_to_backend) expert B, its gradient
// gB and its AdamW moments mB / vB are [E, out, r] F32 — expert e's [out, r] block contiguous, what the grouped
// expert GEMMs read and the weight-gradient GEMM writes, so a step regroups nothing. Everywhere on the host (PEFT
// adapter files, checkpoints, expert parallel's slices and joins, merged checkpoints) B keeps PEFT's [out, r·E]
// (column k·E + e = column k of expert e, peft-adapter.md §6.2). These two move one B-shaped tensor of a module
// across, regrouping for expert modules; a linear module's B is [out, r] both sides.
#pragma once
#include "backend/backend.h"
#include "core/tensor.h"
#include "lora/lora.h"

namespace deltatune {

// The backend's shape of m's B-shaped tensors: {E, out, r} for expert modules, {out, r} else.
Shape lora_b_backend_shape(const LoraModule& m);
// The host's (PEFT's) shape of m's B-shaped tensors: {out, r·E} for expert modules, {out, r} else.
Shape lora_b_host_shape(const LoraModule& m);

// Host F32 [out, r·E] (PEFT) -> a new backend F32 tensor of lora_b_backend_shape(m). Throws Error (naming m's
// path and `what`) when the host tensor's shape is not m's.
Tensor lora_b_upload(Backend& be, const LoraModule& m, const Tensor& host, const std::string& what = "lora_B");

// A backend tensor of lora_b_backend_shape(m) (B, gB, mB or vB of m) -> host F32 in PEFT's layout.
Tensor lora_b_download(Backend& be, const LoraModule& m, const Tensor& t);

// m (on the backend) -> a host copy in PEFT's layout: A, B and, with_moments, the AdamW moments where defined
// (F32); no gradients or compute copies.
LoraModule lora_module_download(Backend& be, const LoraModule& m, bool with_moments);

}  // namespace deltatune
