// Placeholder until this sub-command lands; replaced by its owner.
#include "commands.h"
#include "core/error.h"

namespace deltatune::cli {
int cmd_prepare(const Args&) { throw Error("'deltatune prepare' is not available in this build yet"); }
}  // namespace deltatune::cli
