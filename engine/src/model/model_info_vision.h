// ModelInfo's vision tower: sizes from config.json's vision_config, pixel limits from preprocessor_config.json,
// parameters from the checkpoint's visual.* tensors (or the sizes alone).
#pragma once
#include <string>

#include "deltatune/model_info.h"

namespace deltatune {

class CheckpointReader;

// Fills info->vision from the checkpoint folder `dir` (reader: its tensors, or null to count from the sizes).
// A text-only config leaves it absent; a malformed vision_config / preprocessor_config.json sets
// vision.unusable and a warning, never throws.
// config_json: the config file to read vision_config from (default: dir's config.json).
void model_info_fill_vision(const std::string& dir, const CheckpointReader* reader, ModelInfo* info,
                            const std::string& config_json = "");

}  // namespace deltatune
