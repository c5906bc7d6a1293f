#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace deltatune {

// "cpu", "cuda" (device `gpu`), or "auto" (CUDA when a GPU is usable, else CPU).
std::unique_ptr<Backend> backend_create(const std::string& name, int gpu = 0);

}  // namespace deltatune
