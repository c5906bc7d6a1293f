// Whether this binary carries sm_90a code: DT_KERNELS_SM90A is set by kernels/CMakeLists.txt when
// CMAKE_CUDA_ARCHITECTURES holds 90a.
#include "common/kernel_policy.h"

namespace deltatune::kernels {

bool kernels_built_for_hopper() {
#if defined(DT_KERNELS_SM90A)
  return true;
#else
  return false;
#endif
}

}  // namespace deltatune::kernels
