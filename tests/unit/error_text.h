// The message of the deltatune::Error a call throws, or "" when it throws none: tests assert on what a user reads.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace deltatune {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace deltatune
