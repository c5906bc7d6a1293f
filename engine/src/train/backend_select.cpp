#include "train/backend_select.h"

#include "core/error.h"

namespace deltatune {

std::unique_ptr<Backend> backend_create(const std::string& name, int gpu) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") return make_cuda_backend(gpu);
  if (name == "auto" || name.empty()) return cuda_backend_available() ? make_cuda_backend(gpu) : make_cpu_backend();
  throw Error("backend: unknown backend '" + name + "' (expected auto, cpu or cuda)");
}

}  // namespace deltatune
