// The expert-parallel exchange (backend/token_exchange.h) without a GPU: the workers' host connections (CPU
// data-parallel runs), and threads of one process as the ranks (CPU tests of model/expert_parallel.h; the
// buffers are host memory every thread can read).
#pragma once
#include <barrier>
#include <memory>
#include <vector>

#include "backend/token_exchange.h"
#include "dist/rendezvous.h"

namespace deltatune {

// Through the host connections: every worker's rows reach every worker (a star around rank 0), each keeps its
// part. For CPU workers, whose rows are few.
std::unique_ptr<TokenExchange> make_host_token_exchange(Rendezvous& rv);

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
    std::vector<int32_t> offsets;
  };
  std::vector<Posted> posted_;
  std::barrier<> barrier_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace deltatune
