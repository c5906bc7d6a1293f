// The fused loss's logits precision, the run config's `loss_logits` (RunConfig::loss_logits): "fp32" (the
// default) or "bf16". With bf16 the lm_head GEMM writes its logits in bf16, as HF transformers and Liger's fused
// linear cross-entropy do (the GEMM's output dtype); the cross-entropy's math stays fp32 and its gradient is bf16
// either way. The CUDA backend then holds twice the rows in the same bytes (fewer, larger chunks: fewer reads of
// the lm_head weight). The CPU backend, the fp32 reference, forms fp32 logits whatever this says.
#pragma once
#include <string>

#include "deltatune/error.h"

namespace deltatune {

enum class LossLogits { F32, BF16 };

// The run config's spelling: "fp32" / "bf16".
inline const char* loss_logits_name(LossLogits l) { return l == LossLogits::BF16 ? "bf16" : "fp32"; }

// "fp32" / "bf16"; anything else throws deltatune::Error naming `where` (e.g. "run config: loss_logits").
inline LossLogits loss_logits_from_name(const std::string& name, const std::string& where) {
  if (name == "fp32") return LossLogits::F32;
  if (name == "bf16") return LossLogits::BF16;
  throw Error(where + ": '" + name + "' is not valid (expected one of fp32, bf16)");
}

}  // namespace deltatune
