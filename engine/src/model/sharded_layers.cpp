#include "model/sharded_layers.h"

#include "core/error.h"

namespace deltatune {

namespace {

constexpr size_t kAlign = 256;  // every tensor of a unit starts aligned as the backend's allocations do

Tensor view_at(const Tensor& unit, size_t offset, const Tensor& like) {
  Tensor v = like;
  v.data = static_cast<uint8_t*>(unit.data) + offset;
  v.storage = unit.storage;
  v.device = unit.device;
  return v;
}

}  // namespace

void ShardedLayers::add(const DeviceLayerWeights& w) {
  Layer l;
  l.layout = w;
  size_t bytes = 0;
  for_each_weight_tensor(l.layout, [&](Tensor& t) {
    if (!t.data || t.nbytes() == 0) {
      l.offset.push_back(kNone);
      return;
    }
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    l.offset.push_back(bytes);
    bytes += t.nbytes();
  });
  Tensor unit = be_.alloc({static_cast<int64_t>(bytes)}, DType::U8);
  size_t k = 0;
  for_each_weight_tensor(l.layout, [&](Tensor& t) {
    const size_t off = l.offset[k++];
    if (off != kNone) {
      Tensor dst = view_at(unit, off, t);
      be_.copy(dst, t);
    }
    t.data = nullptr;  // the layout keeps shape and dtype only
    t.storage.reset();
  });
  store_.add(unit);
  layers_.push_back(std::move(l));
}

const DeviceLayerWeights& ShardedLayers::acquire(size_t i, std::optional<size_t> next) {
  check(i < layers_.size(), "internal: ShardedLayers has no layer " + std::to_string(i));
  Layer& l = layers_[i];
  const Tensor& unit = store_.acquire(i, next && *next < layers_.size() ? next : std::nullopt);
  if (!l.bound) {
    DeviceLayerWeights w = l.layout;
    size_t k = 0;
    for_each_weight_tensor(w, [&](Tensor& t) {
      const size_t off = l.offset[k++];
      if (off != kNone) t = view_at(unit, off, t);
    });
    l.bound = std::move(w);
  }
  return *l.bound;
}

void ShardedLayers::release(size_t i) {
  check(i < layers_.size(), "internal: ShardedLayers has no layer " + std::to_string(i));
  layers_[i].bound.reset();
  store_.release(i);
}

}  // namespace deltatune
