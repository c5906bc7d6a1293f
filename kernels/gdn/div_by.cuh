// Division of non-negative 32-bit ints by a divisor fixed for a kernel (a head count), by a multiply-high
// instead of the ~15-instruction sequence of a division by a run-time value (Granlund and Montgomery,
// "Division by invariant integers using multiplication", 1994, figure 4.1). Built by the launcher and passed
// as a kernel argument: its fields stay in the parameter bank, not in registers.
#pragma once
#include <cstdint>

namespace deltatune::kernels {

struct DivBy {
  uint32_t d = 1, m = 1;
  int s1 = 0, s2 = 0;
  // d >= 1; the quotient is exact for every 0 <= n < 2^32
  __host__ __device__ explicit DivBy(int divisor) : d(static_cast<uint32_t>(divisor)) {
    int l = 0;  // ceil(log2 d)
    while ((uint64_t(1) << l) < d) ++l;
    m = static_cast<uint32_t>((uint64_t(1) << 32) * ((uint64_t(1) << l) - d) / d + 1);
    s1 = l < 1 ? l : 1;
    s2 = l > 1 ? l - 1 : 0;
  }
  __device__ __forceinline__ int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n), t = __umulhi(u, m);
    return static_cast<int>((t + ((u - t) >> s1)) >> s2);
  }
};

}  // namespace deltatune::kernels
