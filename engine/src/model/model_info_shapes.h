// The part of ModelInfo that config.json alone decides: sizes, layer pattern and LoRA target groups.
#pragma once
#include "deltatune/model_info.h"
#include "io/model_config.h"

namespace deltatune {

void model_info_fill_shapes(const ModelConfig& c, ModelInfo* info);

}  // namespace deltatune
