// Image statistics of tokenized examples (the Data page's and `deltatune prepare`'s counts, and the memory
// estimate's image tokens per micro-batch).
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "deltatune/data_preview.h"
#include "deltatune/run_config.h"

namespace deltatune {

// Merged tokens of one image: its patch grid's t·h·w / merge².
int64_t image_merged_tokens(const Example::Image& image, int64_t merge_size);

// Sets s.images, s.image_tokens and s.max_image_tokens_per_step (over the first epoch's micro-batches, packed
// as cfg packs them). Leaves them 0 when no example has images.
void add_image_stats(DataStats& s, const std::vector<Example>& examples, const RunConfig& cfg, int64_t merge_size);

}  // namespace deltatune
