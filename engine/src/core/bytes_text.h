// A byte count as users read it in plans and estimates: "12.3 GiB".
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace deltatune {

inline std::string gib_text(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace deltatune
