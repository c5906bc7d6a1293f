// d (+)= −A·B on wgmma (m64n64k16, bf16 operands from shared memory, fp32 accumulators): the instruction's
// imm-scale-a of −1 (PTX ISA, wgmma.mma_async), so that a negated product needs no pass over its
// accumulators. Negation is exact and round-to-nearest is symmetric, so the sums are those of A·B with the
// sign flipped (chunk_grad_wgmma.cu's dW = −dV'·S_nᵀ; device only).
#pragma once
#include <cstdint>

namespace deltatune::kernels::gdn_wgmma {

// As wgmma::mma_m64n64<TA, TB> (common/wgmma.cuh) with A negated.
template <int TA, int TB = 0>
__device__ __forceinline__ void mma_m64n64_neg(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, -1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}

}  // namespace deltatune::kernels::gdn_wgmma
