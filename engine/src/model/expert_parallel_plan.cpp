#include "model/expert_parallel_plan.h"

#include <string>

#include "core/error.h"

namespace deltatune {

ExpertExchangePlan plan_expert_exchange(const std::vector<std::vector<int64_t>>& counts, int rank) {
  const int world = static_cast<int>(counts.size());
  check(world >= 1 && rank >= 0 && rank < world,
        "internal: expert exchange of rank " + std::to_string(rank) + " of " + std::to_string(world));
  const int64_t E = static_cast<int64_t>(counts[0].size());
  for (const auto& c : counts)
    check(static_cast<int64_t>(c.size()) == E, "internal: expert exchange: ranks disagree on the expert count");
  check(E > 0 && E % world == 0, "expert parallel: " + std::to_string(E) + " experts do not divide over " +
                                     std::to_string(world) + " GPUs");
  ExpertExchangePlan p;
  p.experts_per_rank = E / world;
  p.first_expert = rank * p.experts_per_rank;
  const size_t me = static_cast<size_t>(rank);
  for (int d = 0; d < world; ++d) {
    int64_t n = 0;
    for (int64_t e = d * p.experts_per_rank; e < (d + 1) * p.experts_per_rank; ++e) n += counts[me][static_cast<size_t>(e)];
    p.send_rows.push_back(n);
  }
  // Where each (source, local expert) block starts among the received rows (source-major).
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(world));
  int64_t at = 0;
  for (int s = 0; s < world; ++s) {
    int64_t from_s = 0;
    for (int64_t k = 0; k < p.experts_per_rank; ++k) {
      start[static_cast<size_t>(s)].push_back(at + from_s);
      from_s += counts[static_cast<size_t>(s)][static_cast<size_t>(p.first_expert + k)];
    }
    p.recv_rows.push_back(from_s);
    at += from_s;
  }
  p.local_offsets.push_back(0);
  for (int64_t k = 0; k < p.experts_per_rank; ++k) {
    for (int s = 0; s < world; ++s) {
      const int64_t n = counts[static_cast<size_t>(s)][static_cast<size_t>(p.first_expert + k)];
      for (int64_t i = 0; i < n; ++i)
        p.expert_major.push_back(static_cast<int32_t>(start[static_cast<size_t>(s)][static_cast<size_t>(k)] + i));
    }
    p.local_offsets.push_back(static_cast<int32_t>(p.expert_major.size()));
  }
  return p;
}

}  // namespace deltatune
