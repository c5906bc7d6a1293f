// Workers of a test as threads on this machine: a free loopback port and the DistWorld of one rank on it.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "deltatune/distributed.h"

namespace deltatune::testing_loopback {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline DistWorld world(int rank, int size, int port, double timeout = 20, double join = 20) {
  DistWorld w;
  w.rank = rank;
  w.world_size = size;
  w.local_rank = rank;
  w.master_addr = "127.0.0.1";
  w.master_port = port;
  w.timeout_s = timeout;
  w.join_timeout_s = join;
  return w;
}

}  // namespace deltatune::testing_loopback
