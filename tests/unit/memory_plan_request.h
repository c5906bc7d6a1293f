// The memory-plan tests' shared pieces: the golden models' folders, and a plan request (LoRA r = 8 on the
// default groups) that each test completes with the setting it is about (fused loss, host offload, loss logits).
#pragma once
#include <cstdint>
#include <string>

#include "deltatune/memory_plan.h"

namespace deltatune::memory_plan_test {

inline std::string golden(const std::string& name) {
  return std::string(DT_SOURCE_DIR) + "/tests/goldens/models/" + name;
}

inline MemoryPlanRequest plan_request(int64_t tokens, int64_t free) {
  MemoryPlanRequest req;
  req.lora_r = 8;
  req.tokens_per_step = tokens;
  req.free_bytes = free;
  return req;
}

}  // namespace deltatune::memory_plan_test
