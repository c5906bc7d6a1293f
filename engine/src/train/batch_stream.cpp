#include "train/batch_stream.h"

#include "core/error.h"
#include "data/pipeline.h"

namespace deltatune {

BatchStream::BatchStream(const std::vector<Example>& examples, const RunConfig& cfg, DataCursor start)
    : examples_(examples), cfg_(cfg), cur_(start) {
  load();
}

const Batch& BatchStream::next() {
  if (cur_.index >= static_cast<int64_t>(batches_.size())) {
    ++cur_.epoch;
    cur_.index = 0;
    load();
  }
  return batches_[static_cast<size_t>(cur_.index++)];
}

void BatchStream::load() {
  batches_ = data_epoch_batches(examples_, cfg_, cur_.epoch);
  check(!batches_.empty(), "datasets: no training batches (every example was dropped?)");
}

}  // namespace deltatune
