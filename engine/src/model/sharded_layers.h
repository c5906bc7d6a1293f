// The decoder layers' frozen weights sharded over the ranks of a job (ZeRO-3 / FSDP style, sharded_units.h):
// each layer's device tensors are packed into one unit, so a layer is one all-gather; acquire binds the layer's
// weights as views into the gathered unit. Private to engine/src/model.
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "model/blocks.h"
#include "model/sharded_units.h"

namespace deltatune {

class ShardedLayers {
 public:
  ShardedLayers(Backend& be, ShardGatherer& gatherer) : be_(be), store_(be, gatherer) {}

  // Packs the layer `w` (uploaded in full) into the next unit; this rank keeps its shard. The caller then drops
  // `w` (its memory goes back to the backend).
  void add(const DeviceLayerWeights& w);
  size_t layers() const { return layers_.size(); }
  // Kind and shapes of layer i (no data).
  const DeviceLayerWeights& layout(size_t i) const { return layers_.at(i).layout; }

  // Layer i's weights, gathered (or prefetched before), with `next` starting to gather. Valid until release(i).
  const DeviceLayerWeights& acquire(size_t i, std::optional<size_t> next);
  void release(size_t i);

  const ShardedUnitStore& store() const { return store_; }

 private:
  struct Layer {
    DeviceLayerWeights layout;   // tensors without storage
    std::vector<size_t> offset;  // per visited tensor: byte offset in the unit, or kNone (undefined / empty)
    std::optional<DeviceLayerWeights> bound;
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  Backend& be_;
  ShardedUnitStore store_;
  std::vector<Layer> layers_;
};

}  // namespace deltatune
