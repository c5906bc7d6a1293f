#include "dist/grad_buckets.h"

#include <string>

#include "core/error.h"

namespace deltatune {

GradLayout layout_gradients(const std::vector<GradSlot>& slots, int64_t align) {
  check(align >= 1, "internal: layout_gradients: align must be >= 1");
  GradLayout l;
  for (size_t i = 0; i < slots.size(); ++i) {
    check(i == 0 || slots[i].layer >= slots[i - 1].layer,
          "internal: layout_gradients: gradients must come in ascending layer order");
    l.offset.push_back(l.total);
    l.total += (slots[i].numel + align - 1) / align * align;
  }
  return l;
}

std::vector<GradBucket> plan_buckets(const std::vector<GradSlot>& slots, const GradLayout& layout,
                                     int64_t cap_elements) {
  check(layout.offset.size() == slots.size(), "internal: plan_buckets: layout of other slots");
  std::vector<GradBucket> out;
  int64_t end = layout.total;  // the open bucket is [offset of its lowest slot, end)
  bool open = false;
  GradBucket b;
  for (size_t k = slots.size(); k-- > 0;) {
    const int64_t begin = layout.offset[k];
    if (open && end - begin > cap_elements) {  // adding slot k would overflow: close the open bucket
      out.push_back(b);
      end = b.begin;
      open = false;
    }
    b.begin = begin;
    b.end = end;
    b.ready_after_layer = slots[k].layer;
    open = true;
  }
  if (open) out.push_back(b);
  return out;
}

}  // namespace deltatune
