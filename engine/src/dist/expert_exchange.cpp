#include "dist/expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace deltatune {

namespace {

class HostTokenExchange final : public TokenExchange {
 public:
  explicit HostTokenExchange(Rendezvous& rv) : rv_(rv) {}
  int rank() const override { return rv_.rank(); }
  int world() const override { return rv_.world(); }

  // CPU workers: the offsets are host memory, read when the gather starts.
  void gather_offsets_start(const void* offsets, int64_t n) override {
    mine_.assign(static_cast<const int32_t*>(offsets), static_cast<const int32_t*>(offsets) + n);
  }

  std::vector<std::vector<int32_t>> gather_offsets_wait() override {
    const auto all = rv_.all_gather(std::string(reinterpret_cast<const char*>(mine_.data()), mine_.size() * 4));
    std::vector<std::vector<int32_t>> out;
    for (const std::string& b : all) {
      check(b.size() == mine_.size() * 4, "internal: host token exchange: offsets of another length");
      out.emplace_back(mine_.size());
      std::memcpy(out.back().data(), b.data(), b.size());
    }
    return out;
  }

  void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override {
    int64_t total = 0;
    for (int64_t n : send_bytes) total += n;
    // Each worker's buffer prefixed by its per-destination sizes.
    std::string mine(reinterpret_cast<const char*>(send_bytes.data()), send_bytes.size() * 8);
    mine.append(static_cast<const char*>(send), static_cast<size_t>(total));
    const auto all = rv_.all_gather(mine);
    int64_t at = 0;
    const size_t W = all.size(), me = static_cast<size_t>(rank());
    for (size_t s = 0; s < W; ++s) {
      std::vector<int64_t> sizes(W);
      std::memcpy(sizes.data(), all[s].data(), W * 8);
      int64_t from = static_cast<int64_t>(W * 8);
      for (size_t d = 0; d < me; ++d) from += sizes[d];
      check(sizes[me] == recv_bytes[s], "internal: host all_to_all: rank " + std::to_string(s) + " sends " +
                                            std::to_string(sizes[me]) + " bytes, expected " +
                                            std::to_string(recv_bytes[s]));
      if (sizes[me]) std::memcpy(static_cast<char*>(recv) + at, all[s].data() + from, static_cast<size_t>(sizes[me]));
      at += sizes[me];
    }
  }

 private:
  Rendezvous& rv_;
  std::vector<int32_t> mine_;
};

}  // namespace

std::unique_ptr<TokenExchange> make_host_token_exchange(Rendezvous& rv) {
  return std::make_unique<HostTokenExchange>(rv);
}

class InProcessExchangeGroup::Rank final : public TokenExchange {
 public:
  Rank(InProcessExchangeGroup& g, int r) : g_(g), r_(r) {}
  int rank() const override { return r_; }
  int world() const override { return static_cast<int>(g_.posted_.size()); }

  void gather_offsets_start(const void* offsets, int64_t n) override {
    g_.posted_[static_cast<size_t>(r_)].offsets.assign(static_cast<const int32_t*>(offsets),
                                                       static_cast<const int32_t*>(offsets) + n);
  }

  std::vector<std::vector<int32_t>> gather_offsets_wait() override {
    g_.barrier_.arrive_and_wait();
    std::vector<std::vector<int32_t>> all;
    for (const Posted& p : g_.posted_) all.push_back(p.offsets);
    g_.barrier_.arrive_and_wait();
    return all;
  }

  void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override {
    Posted& mine = g_.posted_[static_cast<size_t>(r_)];
    mine.send = send;
    mine.send_bytes = send_bytes;
    g_.barrier_.arrive_and_wait();  // every rank's buffer posted
    int64_t at = 0;
    for (int s = 0; s < world(); ++s) {
      const Posted& src = g_.posted_[static_cast<size_t>(s)];
      int64_t from = 0;  // where src's block for this rank starts
      for (int d = 0; d < r_; ++d) from += src.send_bytes[static_cast<size_t>(d)];
      const int64_t n = src.send_bytes[static_cast<size_t>(r_)];
      check(n == recv_bytes[static_cast<size_t>(s)], "internal: all_to_all: rank " + std::to_string(s) + " sends " +
                                                        std::to_string(n) + " bytes to rank " + std::to_string(r_) +
                                                        ", which expects " +
                                                        std::to_string(recv_bytes[static_cast<size_t>(s)]));
      if (n) std::memcpy(static_cast<char*>(recv) + at, static_cast<const char*>(src.send) + from, static_cast<size_t>(n));
      at += n;
    }
    g_.barrier_.arrive_and_wait();  // every rank done reading
  }

 private:
  InProcessExchangeGroup& g_;
  int r_;
};

InProcessExchangeGroup::InProcessExchangeGroup(int world)
    : posted_(static_cast<size_t>(std::max(world, 1))), barrier_(std::max<std::ptrdiff_t>(world, 1)) {
  check(world >= 1, "InProcessExchangeGroup: world must be at least 1, got " + std::to_string(world));
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessExchangeGroup::~InProcessExchangeGroup() = default;

TokenExchange& InProcessExchangeGroup::rank(int r) {
  check(r >= 0 && r < static_cast<int>(ranks_.size()), "InProcessExchangeGroup: no rank " + std::to_string(r));
  return *ranks_[static_cast<size_t>(r)];
}

}  // namespace deltatune
