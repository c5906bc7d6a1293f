#include "data/batch.h"

#include "core/error.h"

namespace deltatune {

Batch batch_from_examples(const std::vector<const Example*>& examples) {
  Batch b;
  b.cu_seqlens.push_back(0);
  for (const Example* ex : examples) {
    check(ex->input_ids.size() == ex->labels.size(), "internal: example with labels of another length");
    const size_t n = ex->input_ids.size();
    if (n == 0) continue;
    for (size_t t = 0; t < n; ++t) {
      b.input_ids.push_back(ex->input_ids[t]);
      const int32_t target = t + 1 < n ? ex->labels[t + 1] : -100;
      b.targets.push_back(target);
      b.positions.push_back(static_cast<int32_t>(t));
      if (target != -100) ++b.num_targets;
    }
    b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
    b.images.insert(b.images.end(), ex->images.begin(), ex->images.end());
  }
  b.rows = static_cast<int64_t>(examples.size());
  return b;
}

}  // namespace deltatune
