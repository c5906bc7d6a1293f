// Errors carry a message a user can act on: which file/key/field, and what was expected.
#pragma once
#include <stdexcept>
#include <string>

namespace deltatune {

// Thrown for anything the user can fix (bad file, bad setting, out of memory with advice).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when cond is false.
inline void check(bool cond, const std::string& message) {
  if (!cond) throw Error(message);
}

}  // namespace deltatune
