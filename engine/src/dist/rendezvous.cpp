#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

namespace deltatune {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x50444454;  // "TDDP"

struct Header {
  uint32_t magic;
  uint32_t kind;
  uint64_t len;
};

std::string errno_text(int e) { return std::strerror(e); }

bool write_full(int fd, const void* data, size_t n, int flags = 0) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | flags);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_full(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Keepalive probes find a peer whose machine vanished (no FIN ever comes) in about a minute.
void tune_socket(int fd) {
  int one = 1, idle = 30, intvl = 5, cnt = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

void set_recv_timeout(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Dual-stack listener on every interface (IPv6 with IPv4 mapped), else IPv4.
int listen_on(int port, std::string& why) {
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc == 0 && ::listen(fd, 128) == 0) return fd;
    why = errno_text(errno);
    ::close(fd);
  }
  return -1;
}

int connect_once(const std::string& host, int port, std::string& why) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (g != 0) {
    why = std::string("cannot resolve '") + host + "': " + ::gai_strerror(g);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    why = errno_text(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    const uint64_t n = p.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += p;
  }
  return out;
}

std::vector<std::string> unpack(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i + sizeof(uint64_t) <= s.size()) {
    uint64_t n = 0;
    std::memcpy(&n, s.data() + i, sizeof n);
    i += sizeof n;
    if (n > s.size() - i) throw DistFault("rendezvous: a malformed message arrived (truncated list)");
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

template <class T>
std::string bytes_of(std::span<const T> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

}  // namespace

Rendezvous::Rendezvous(const DistWorld& w)
    : rank_(w.rank), world_(w.world_size), timeout_s_(w.timeout_s), fds_(w.world_size, -1),
      inbox_(w.world_size), names_(w.world_size) {
  names_[rank_] = host_name() + ", pid " + std::to_string(::getpid());
  if (world_ == 1) return;
  const auto deadline = Clock::now() + std::chrono::duration<double>(w.join_timeout_s);
  const std::string where = w.master_addr + ":" + std::to_string(w.master_port);
  if (rank_ == 0) {
    std::string why;
    const int lfd = listen_on(w.master_port, why);
    if (lfd < 0)
      throw DistFault("rank 0 cannot listen on port " + std::to_string(w.master_port) + " (" + why +
                      "): MASTER_PORT must be a free port on rank 0's machine");
    int joined = 1;
    try {
      while (joined < world_) {
        if (Clock::now() > deadline) {
          std::string missing;
          for (int r = 1; r < world_; ++r)
            if (fds_[r] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          throw DistFault("rank 0 waited " + std::to_string(static_cast<int>(w.join_timeout_s)) +
                          " s at " + where + " for rank(s) " + missing +
                          " to join (were they started with the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE=" +
                          std::to_string(world_) + "?)");
        }
        pollfd p{lfd, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) continue;
        const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        tune_socket(fd);
        set_recv_timeout(fd, 30);
        Header h{};
        std::string hello;
        bool ok = read_full(fd, &h, sizeof h) && h.magic == kMagic && h.len < 4096;
        if (ok) {
          hello.resize(h.len);
          ok = read_full(fd, hello.data(), h.len);
        }
        set_recv_timeout(fd, 0);
        const auto parts = ok ? unpack(hello) : std::vector<std::string>{};
        if (parts.size() != 3) {  // not one of ours (a port scan, another program)
          ::close(fd);
          continue;
        }
        const int r = std::atoi(parts[0].c_str()), ws = std::atoi(parts[1].c_str());
        if (ws != world_ || r <= 0 || r >= world_ || fds_[r] >= 0) {
          ::close(fd);
          throw DistFault("a worker (" + parts[2] + ") joined " + where + " as rank " + parts[0] + " of " +
                          parts[1] + ", but rank 0 expects ranks 1.." + std::to_string(world_ - 1) +
                          " of WORLD_SIZE " + std::to_string(world_) + (r > 0 && r < world_ && fds_[r] >= 0
                                                                                ? " and rank " + parts[0] +
                                                                                      " has already joined"
                                                                                : ""));
        }
        fds_[r] = fd;
        names_[r] = parts[2];
        ++joined;
      }
    } catch (...) {
      ::close(lfd);
      for (int& fd : fds_)
        if (fd >= 0) ::close(fd), fd = -1;
      throw;
    }
    ::close(lfd);
    const std::string table = pack(names_);
    for (int r = 1; r < world_; ++r) send(r, Kind::Data, table);
  } else {
    std::string why = "not tried";
    int fd = -1;
    while (fd < 0) {
      fd = connect_once(w.master_addr, w.master_port, why);
      if (fd >= 0) break;
      if (Clock::now() > deadline)
        throw DistFault("rank " + std::to_string(rank_) + " could not reach rank 0 at " + where + " in " +
                        std::to_string(static_cast<int>(w.join_timeout_s)) + " s (" + why +
                        "): is rank 0 running, and MASTER_ADDR/MASTER_PORT right?");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    tune_socket(fd);
    fds_[0] = fd;
    send(0, Kind::Data, pack({std::to_string(rank_), std::to_string(world_), names_[rank_]}));
    const double saved = timeout_s_;
    timeout_s_ = std::max(1.0, std::chrono::duration<double>(deadline - Clock::now()).count());
    const auto table = unpack(recv(0));
    timeout_s_ = saved;
    if (static_cast<int>(table.size()) != world_) throw DistFault("rendezvous: rank 0 sent a bad rank table");
    names_ = table;
  }
}

Rendezvous::~Rendezvous() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

std::string Rendezvous::describe(int r) const {
  const std::string& n = names_[static_cast<size_t>(r)];
  return "rank " + std::to_string(r) + (n.empty() ? "" : " (" + n + ")");
}

void Rendezvous::set_fault(const std::string& why) {
  if (!fault_.empty()) return;
  fault_ = why;
  if (rank_ == 0) announce_failure(why);  // the other workers stop at their next poll, not at a timeout
}

void Rendezvous::send(int peer, Kind kind, const std::string& payload) {
  const int fd = fd_of(peer);
  if (fd < 0) throw DistFault(fault_.empty() ? describe(peer) + " is not connected" : fault_);
  const Header h{kMagic, static_cast<uint32_t>(kind), payload.size()};
  if (!write_full(fd, &h, sizeof h) || !write_full(fd, payload.data(), payload.size())) {
    const int e = errno;
    set_fault("sending to " + describe(peer) + " failed (" + errno_text(e) +
              "): the process ended or its machine became unreachable");
    throw DistFault(fault_);
  }
}

bool Rendezvous::read_message(int peer) {
  const int fd = fd_of(peer);
  Header h{};
  std::string payload;
  bool ok = read_full(fd, &h, sizeof h) && h.magic == kMagic;
  if (ok) {
    payload.resize(h.len);
    ok = read_full(fd, payload.data(), h.len);
  }
  if (!ok) {
    ::close(fd);
    fds_[static_cast<size_t>(peer)] = -1;
    set_fault(describe(peer) +
              " closed its connection: the process ended (killed, crashed, or out of memory) or its machine "
              "became unreachable");
    return false;
  }
  if (h.kind == static_cast<uint32_t>(Kind::Fail)) {
    set_fault(payload);
    return false;
  }
  inbox_[static_cast<size_t>(peer)].push_back(std::move(payload));
  return true;
}

void Rendezvous::pump(int timeout_ms) {
  std::vector<pollfd> ps;
  std::vector<int> peers;
  for (int r = 0; r < world_; ++r)
    if (fds_[r] >= 0) {
      ps.push_back({fds_[r], POLLIN, 0});
      peers.push_back(r);
    }
  if (ps.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  if (::poll(ps.data(), ps.size(), timeout_ms) <= 0) return;
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].revents & (POLLIN | POLLHUP | POLLERR)) read_message(peers[i]);
}

std::string Rendezvous::recv(int peer) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  auto& box = inbox_[static_cast<size_t>(peer)];
  while (true) {
    if (!box.empty()) {
      std::string m = std::move(box.front());
      box.pop_front();
      return m;
    }
    if (!fault_.empty()) throw DistFault(fault_);
    if (Clock::now() > deadline) {
      set_fault("no answer from " + describe(peer) + " in " + std::to_string(static_cast<int>(timeout_s_)) +
                " s (DELTATUNE_DIST_TIMEOUT): it hangs, or its machine is unreachable");
      throw DistFault(fault_);
    }
    pump(50);
  }
}

std::string Rendezvous::poll_fault() {
  if (fault_.empty() && world_ > 1) pump(0);
  return fault_;
}

void Rendezvous::announce_failure(const std::string& why) noexcept {
  const Header h{kMagic, static_cast<uint32_t>(Kind::Fail), why.size()};
  for (int fd : fds_) {
    if (fd < 0) continue;
    if (write_full(fd, &h, sizeof h, MSG_DONTWAIT)) write_full(fd, why.data(), why.size(), MSG_DONTWAIT);
  }
}

std::string Rendezvous::broadcast(const std::string& bytes) {
  if (world_ == 1) return bytes;
  if (rank_ != 0) return recv(0);
  for (int r = 1; r < world_; ++r) send(r, Kind::Data, bytes);
  return bytes;
}

std::string Rendezvous::scatter(const std::vector<std::string>& parts) {
  if (rank_ != 0) return recv(0);
  if (static_cast<int>(parts.size()) != world_)
    throw DistFault("rendezvous: scatter of " + std::to_string(parts.size()) + " parts over " +
                    std::to_string(world_) + " ranks");
  for (int r = 1; r < world_; ++r) send(r, Kind::Data, parts[static_cast<size_t>(r)]);
  return parts[0];
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine) {
  if (world_ == 1) return {mine};
  if (rank_ != 0) {
    send(0, Kind::Data, mine);
    auto all = unpack(recv(0));
    if (static_cast<int>(all.size()) != world_) throw DistFault("rendezvous: rank 0 sent a bad all-gather");
    return all;
  }
  std::vector<std::string> all(static_cast<size_t>(world_));
  all[0] = mine;
  for (int r = 1; r < world_; ++r) all[static_cast<size_t>(r)] = recv(r);
  const std::string packed = pack(all);
  for (int r = 1; r < world_; ++r) send(r, Kind::Data, packed);
  return all;
}

namespace {
template <class T>
void sum_in_rank_order(Rendezvous& rv, std::span<T> values, const std::vector<std::string>& parts) {
  for (size_t r = 1; r < parts.size(); ++r) {
    if (parts[r].size() != values.size_bytes())
      throw DistFault("rendezvous: " + rv.describe(static_cast<int>(r)) + " sent " +
                      std::to_string(parts[r].size() / sizeof(T)) + " values to sum, rank 0 has " +
                      std::to_string(values.size()) + " (do all ranks run the same program and config?)");
    const T* p = reinterpret_cast<const T*>(parts[r].data());
    for (size_t i = 0; i < values.size(); ++i) values[i] += p[i];
  }
}
}  // namespace

template <class T>
void Rendezvous::sum_values(std::span<T> values) {
  if (world_ == 1) return;
  if (rank_ != 0) {
    send(0, Kind::Data, bytes_of<T>(values));
    const std::string r = recv(0);
    if (r.size() != values.size_bytes()) throw DistFault("rendezvous: rank 0 sent a sum of another size");
    std::memcpy(values.data(), r.data(), r.size());
    return;
  }
  std::vector<std::string> parts(static_cast<size_t>(world_));
  for (int r = 1; r < world_; ++r) parts[static_cast<size_t>(r)] = recv(r);
  sum_in_rank_order(*this, values, parts);
  broadcast(bytes_of<T>(values));
}

void Rendezvous::sum(std::span<double> values) { sum_values(values); }
void Rendezvous::sum(std::span<float> values) { sum_values(values); }

}  // namespace deltatune
