// Threads of one process as the ranks of an expert-parallel exchange (backend/token_exchange.h), for CPU tests
// of model/expert_parallel.h: the buffers are host memory every thread can read.
#pragma once
#include <barrier>
#include <memory>
#include <vector>

#include "backend/token_exchange.h"

namespace deltatune {

class InProcessExchangeGroup {
 public:
  explicit InProcessExchangeGroup(int world);
  ~InProcessExchangeGroup();
  TokenExchange& rank(int r);

 private:
  class Rank;
  struct Posted {
    const void* send = nullptr;
    std::vector<int64_t> send_bytes;
    std::vector<int64_t> counts;
  };
  std::vector<Posted> posted_;
  std::barrier<> barrier_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace deltatune
