// Tokenized examples and packed micro-batches: the hand-off from the data pipeline to the trainer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deltatune {

// One training example. labels are aligned with input_ids (NOT shifted): labels[t] = input_ids[t] where
// token t is trained, -100 where it is not. Token t is predicted from tokens < t.
struct Example {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

// A micro-batch: whole sequences concatenated (packed rows and padded batches alike are described this
// way: padding never needs to be computed). targets are already shifted within each sequence:
// targets[t] = labels[t+1] of the same sequence, -100 at each sequence's last token.
struct Batch {
  std::vector<int32_t> input_ids;   // [T]
  std::vector<int32_t> targets;     // [T]
  std::vector<int32_t> positions;   // [T] position within its sequence
  std::vector<int32_t> cu_seqlens;  // [N+1]
  int64_t num_targets = 0;          // targets != -100
  int64_t rows = 0;                 // packed rows (or examples when not packing) it came from
};

// Builds a Batch from whole examples (each its own sequence).
Batch batch_from_examples(const std::vector<const Example*>& examples);

}  // namespace deltatune
