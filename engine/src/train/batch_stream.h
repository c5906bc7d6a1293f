// The endless stream of training micro-batches, epoch after epoch, resumable at a saved position.
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "deltatune/run_config.h"

namespace deltatune {

// Position in the stream of micro-batches: epoch and index within that epoch's batch list.
struct DataCursor {
  int64_t epoch = 0;
  int64_t index = 0;
};

class BatchStream {
 public:
  BatchStream(const std::vector<Example>& examples, const RunConfig& cfg, DataCursor start);
  const Batch& next();  // valid until the next call that starts a new epoch
  DataCursor cursor() const { return cur_; }
  int64_t per_epoch() const { return static_cast<int64_t>(batches_.size()); }

 private:
  void load();
  const std::vector<Example>& examples_;
  const RunConfig& cfg_;
  DataCursor cur_;
  std::vector<Batch> batches_;
};

}  // namespace deltatune
