#include "data/image_stats.h"

#include <algorithm>

#include "data/packing.h"

namespace deltatune {

int64_t image_merged_tokens(const Example::Image& image, int64_t merge_size) {
  const int64_t m2 = std::max<int64_t>(1, merge_size * merge_size);
  return image.grid[0] * image.grid[1] * image.grid[2] / m2;
}

void add_image_stats(DataStats& s, const std::vector<Example>& examples, const RunConfig& cfg, int64_t merge_size) {
  std::vector<int64_t> per_example(examples.size(), 0), lengths;
  lengths.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    for (const Example::Image& im : examples[i].images) per_example[i] += image_merged_tokens(im, merge_size);
    s.images += static_cast<int64_t>(examples[i].images.size());
    s.image_tokens += per_example[i];
    lengths.push_back(static_cast<int64_t>(examples[i].input_ids.size()));
  }
  if (s.images == 0) return;
  const EpochPlan plan = plan_epoch(lengths, cfg.sequence_len, cfg.sample_packing,
                                    std::max<int64_t>(1, cfg.micro_batch_size), static_cast<uint64_t>(cfg.seed), 0);
  for (const auto& batch : plan.batches) {
    int64_t n = 0;
    for (size_t i : batch) n += per_example[i];
    s.max_image_tokens_per_step = std::max(s.max_image_tokens_per_step, n);
  }
}

}  // namespace deltatune
