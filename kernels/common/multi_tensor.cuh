// Many-tensor launches: the tensors travel as a table in the kernel's parameters (no upload, nothing to keep
// alive after the launch), N per launch; blockIdx.y picks a table entry, blockIdx.x strides over its elements.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace deltatune::kernels {

// For each batch of at most N of `count` items: fill(table, j, item) puts item in slot j and returns its element
// count; launch(table, slots, largest count) launches. Stops at the first launch error.
template <int N, class Table, class Fill, class Launch>
cudaError_t launch_in_batches(int count, Fill&& fill, Launch&& launch) {
  for (int base = 0; base < count; base += N) {
    const int k = count - base < N ? count - base : N;
    Table t{};
    int64_t most = 1;
    for (int j = 0; j < k; ++j) {
      const int64_t n = fill(t, j, base + j);
      most = n > most ? n : most;
    }
    launch(t, k, most);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace deltatune::kernels
