// check() with a message put together only when the condition fails: for the checks that run on every op of a
// training step, where building the text each time cost more host time than the op's launch (the optimizer's
// 372 AdamW slots of a 2b adapter: 1.2 ms a step, session 32).
#pragma once
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace deltatune {

template <class MakeMessage>
requires std::is_invocable_r_v<std::string, MakeMessage>
inline void check(bool cond, MakeMessage&& message) {
  if (!cond) throw Error(std::forward<MakeMessage>(message)());
}

}  // namespace deltatune
