// Finds and loads the CUDA backend module once per process: first in the program itself (test programs
// link the CUDA backend statically), then lib/deltatune/libdeltatune-cuda.so beside the program's bin/
// folder (installed: /usr/bin -> /usr/lib/deltatune; build tree: build/app -> build/lib/deltatune).
#pragma once
#include <string>

#include "backend/cuda_module.h"

namespace deltatune {

struct CudaModuleLoad {
  const CudaModule* module = nullptr;  // null when it could not be loaded
  std::string path;                    // the file loaded or tried ("built in" when linked into the program)
  std::string problem;                 // one line: why it did not load, and what to install
};

const CudaModuleLoad& cuda_module();

}  // namespace deltatune
