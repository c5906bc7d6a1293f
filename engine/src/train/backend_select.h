#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace deltatune {

// "cpu", "cuda" (device `gpu`), or "auto" (CUDA when a GPU is usable, else CPU). "cuda" throws the
// reason when the GPU backend cannot run (no or too old driver, GPU module or cuBLAS missing: what to
// install); "auto" then takes the CPU and puts the reason in *note. `kernels`: the run config's `kernels`
// setting for the CUDA backend ("auto" | "portable").
std::unique_ptr<Backend> backend_create(const std::string& name, int gpu = 0, std::string* note = nullptr,
                                        const std::string& kernels = "auto");

}  // namespace deltatune
