// The LoRA gradients of a data-parallel run in one flat F32 buffer, cut into buckets that are summed over the
// workers while the backward goes on: the buffer holds the gradients by ascending decoder layer, the backward
// finishes layers from the last to the first, so a bucket is a contiguous range of layers that is complete
// (and its all-reduce can start) as soon as the backward of its lowest layer is done.
#pragma once
#include <cstdint>
#include <vector>

namespace deltatune {

struct GradSlot {
  int layer = 0;      // decoder layer of the LoRA module
  int64_t numel = 0;  // elements of this gradient tensor (gA or gB)
};

struct GradLayout {
  std::vector<int64_t> offset;  // per slot, in elements, each a multiple of `align`
  int64_t total = 0;            // elements of the flat buffer
};

struct GradBucket {
  int64_t begin = 0, end = 0;  // element range of the flat buffer
  int ready_after_layer = 0;   // lowest layer inside: its backward completes the bucket
};

// Slots must come in ascending layer order (the adapter's module order). Offsets are padded to `align`
// elements (aligned vector loads in the kernels that read the views).
GradLayout layout_gradients(const std::vector<GradSlot>& slots, int64_t align);

// Buckets of at most cap_elements each (a slot larger than the cap is a bucket of its own), in the order the
// backward completes them: highest layers first. Every slot lies in exactly one bucket.
std::vector<GradBucket> plan_buckets(const std::vector<GradSlot>& slots, const GradLayout& layout,
                                     int64_t cap_elements);

}  // namespace deltatune
