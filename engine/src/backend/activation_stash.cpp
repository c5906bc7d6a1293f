// make_activation_stash (backend/activation_stash.h).
#include "backend/activation_stash.h"

namespace deltatune {

std::unique_ptr<ActivationStash> make_activation_stash(Backend& be) {
  auto* maker = dynamic_cast<ActivationStashMaker*>(&be);
  return maker ? maker->create_activation_stash() : nullptr;
}

}  // namespace deltatune
