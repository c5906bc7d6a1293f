// Device tables derived from a sequence layout (the GDN chunk list, the attention tile lists), kept for the
// last few layouts. Every layer of a training step asks for the same tables, and building and uploading them
// per call (pageable copies) is host time spent in front of the kernels.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace deltatune::cuda {

class LayoutTables {
 public:
  enum class Kind { GdnChunks, AttnTiles, AttnTilesMma };
  struct Entry {
    Kind kind = Kind::GdnChunks;
    std::vector<int32_t> cu;  // the layout's host cu_seqlens
    Tensor a, b;              // the tables (b unused by the attention kinds)
    int64_t n = 0;
  };

  // The entry for (kind, cu), made by `make(Entry&)` (which fills a, b and n) when it is not held.
  template <class Make>
  const Entry& get(Kind kind, const std::vector<int32_t>& cu, Make&& make) {
    for (const Entry& e : entries_)
      if (e.kind == kind && e.cu == cu && !e.cu.empty()) return e;
    Entry& e = entries_[next_];
    next_ = (next_ + 1) % entries_.size();
    e = Entry{};
    make(e);
    e.kind = kind;
    e.cu = cu;
    return e;
  }
  // Every table held now (a recording that reads them keeps them alive).
  void keep(std::vector<Tensor>& out) const {
    for (const Entry& e : entries_)
      for (const Tensor* t : {&e.a, &e.b})
        if (t->defined()) out.push_back(*t);
  }

 private:
  std::array<Entry, 6> entries_{};
  size_t next_ = 0;
};

}  // namespace deltatune::cuda
