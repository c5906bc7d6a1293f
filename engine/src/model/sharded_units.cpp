#include "model/sharded_units.h"

#include <algorithm>

#include "core/error.h"

namespace deltatune {

namespace {

// Bytes [begin, begin + n) of a backend tensor as a U8 view.
Tensor byte_view(const Tensor& t, size_t begin, size_t n) {
  Tensor v = t;
  v.data = static_cast<uint8_t*>(t.data) + begin;
  v.dtype = DType::U8;
  v.shape = {static_cast<int64_t>(n)};
  return v;
}

}  // namespace

ShardedUnitStore::ShardedUnitStore(Backend& be, ShardGatherer& gatherer) : be_(be), g_(gatherer) {
  check(g_.world() >= 1 && g_.rank() >= 0 && g_.rank() < g_.world(),
        "internal: shard gatherer rank " + std::to_string(g_.rank()) + " of " + std::to_string(g_.world()));
}

size_t ShardedUnitStore::add(const Tensor& full) {
  const size_t n = static_cast<size_t>(g_.world()), r = static_cast<size_t>(g_.rank());
  const size_t bytes = full.nbytes();
  // Shards of a multiple of 256 bytes: every rank's slice of the gathered buffer starts aligned.
  const size_t shard = (bytes + n * 256 - 1) / (n * 256) * 256;
  Tensor mine = be_.zeros({static_cast<int64_t>(shard)}, DType::U8);
  const size_t begin = std::min(bytes, r * shard), end = std::min(bytes, begin + shard);
  if (end > begin) {
    Tensor dst = byte_view(mine, 0, end - begin);
    be_.copy(dst, byte_view(full, begin, end - begin));
  }
  sizes_.push_back(bytes);
  shard_bytes_.push_back(shard);
  shards_.push_back(std::move(mine));
  full_.emplace_back();
  return sizes_.size() - 1;
}

void ShardedUnitStore::check_unit(size_t unit) const {
  check(unit < sizes_.size(), "internal: ShardedUnitStore has no unit " + std::to_string(unit) + " (of " +
                                  std::to_string(sizes_.size()) + ")");
}

void ShardedUnitStore::start(size_t unit) {
  check_unit(unit);
  if (full_[unit]) return;
  Gathered g;
  g.full = be_.alloc({static_cast<int64_t>(shard_bytes_[unit] * static_cast<size_t>(g_.world()))}, DType::U8);
  g.ticket = g_.start_all_gather(shards_[unit].data, g.full.data, shard_bytes_[unit]);
  g.full.shape = {static_cast<int64_t>(sizes_[unit])};  // the padding past the unit's bytes is never read
  full_[unit] = std::move(g);
  ++gathers_;
  peak_ = std::max(peak_, gathered_now());
}

const Tensor& ShardedUnitStore::acquire(size_t unit, std::optional<size_t> prefetch) {
  start(unit);
  Gathered& g = *full_[unit];
  if (!g.waited) {
    g_.ready(g.ticket);
    g.waited = true;
  }
  if (prefetch && *prefetch != unit) start(*prefetch);
  return g.full;
}

void ShardedUnitStore::release(size_t unit) {
  check_unit(unit);
  // A gather never waited for (a prefetch not used) may still be writing: the compute work that reuses the
  // memory next must come after it.
  if (full_[unit] && !full_[unit]->waited) g_.ready(full_[unit]->ticket);
  full_[unit].reset();
}

ShardedUnitStore::~ShardedUnitStore() {
  try {
    for (size_t u = 0; u < full_.size(); ++u) release(u);
  } catch (const std::exception&) {  // a failed communicator: nothing more to order after
  }
}

size_t ShardedUnitStore::resident_bytes() const {
  size_t s = 0;
  for (const auto& sh : shards_) s += sh.nbytes();
  return s;
}

size_t ShardedUnitStore::gathered_now() const {
  return static_cast<size_t>(std::count_if(full_.begin(), full_.end(), [](const auto& f) { return f.has_value(); }));
}

}  // namespace deltatune
