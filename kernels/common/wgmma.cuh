// Hopper warpgroup tensor-core helpers (sm_90a only, device only): wgmma.mma_async m64nNk16 with bf16
// operands read from shared memory through matrix descriptors and fp32 accumulators in registers, and
// stmatrix.
//
// Shared-memory operand layout used here: the no-swizzle canonical layout (PTX ISA, "Shared Memory Matrix
// Layout"). A core matrix is 8 rows of 16 bytes (8 bf16) stored as 128 contiguous bytes.
//   K-major operand (A[m][k], or B[k][n] stored as [n][k]; k contiguous): core-matrix rows are m (n), its 16
//     bytes 8 consecutive k.
//   MN-major operand (transpose flag 1; A[m][k] stored with m contiguous): core-matrix rows are k, its 16
//     bytes 8 consecutive m.
//   Descriptor: LBO = byte distance between core matrices adjacent in K, SBO = between core matrices adjacent
//     in M (N), for both majors (checked on the GPU by tests/cuda/wgmma_test.cpp).
// Accumulators of m64nN (fp32, N/2 registers a thread): warp w of the warpgroup holds rows 16w + lane/4 (+8);
// register 4j + 2h + e is (row 16w + lane/4 + 8h, column 8j + 2(lane%4) + e): mma.m16n8 C fragments side by
// side (checked by the same test).
// Ordering: shared memory written by ordinary stores or cp.async and read next by wgmma needs
// fence_proxy_async() in the writing threads before the barrier; registers written by ordinary instructions
// and then used as accumulators need fence() before the first wgmma; results are valid after commit() and
// wait<0>().
#pragma once
#include <cstdint>

namespace deltatune::kernels::wgmma {

// Byte offset of element (r, k) in a tile of R x K bf16 (rows r, K contiguous in the source) stored as core
// matrices: 8-row groups KB = K·16 bytes apart, 8-element column groups 128 bytes apart. As a K-major
// operand: LBO 128, SBO K·16; as the MN-major operand whose m is k here (the source's columns): LBO K·16,
// SBO 128.
template <int K>
__host__ __device__ constexpr uint32_t core_offset(int r, int k) {
  return uint32_t((r >> 3) * (K * 16) + (k >> 3) * 128 + (r & 7) * 16 + (k & 7) * 2);
}

__device__ __forceinline__ uint64_t desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving other instructions' accesses to accumulator registers across this point
// (before fence() and after wait<0>()): accumulators touched near a wgmma on a path the compiler takes to be
// divergent make ptxas serialize every wgmma of the kernel (its C7520 warning).
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A·B, m64n64k16, A and B from shared memory (descriptors a, b); TA / TB: A / B is MN-major.
// accumulate = false ignores d's old values. ScaleA = -1 negates A (the instruction's imm-scale-a): d (+)= −A·B
// with no pass over the accumulators; negation is exact and round-to-nearest symmetric, so the sums are those of
// A·B with the sign flipped.
template <int TA, int TB = 0, int ScaleA = 1>
__device__ __forceinline__ void mma_m64n64(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(ScaleA == 1 || ScaleA == -1, "wgmma's imm-scale-a is 1 or -1");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, %37, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TA), "n"(TB), "n"(ScaleA));
}

// d (+)= A·B, m64n16k16 (8 accumulator registers), as mma_m64n64.
template <int TA, int TB = 0>
__device__ __forceinline__ void mma_m64n16(float (&d)[8], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, %12;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}

// d (+)= A·B, m64n32k16 (16 accumulator registers), as mma_m64n64.
template <int TA, int TB = 0>
__device__ __forceinline__ void mma_m64n32(float (&d)[16], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}

// d (+)= A·B, m64n256k16 (128 accumulator registers), as mma_m64n64.
template <int TA, int TB = 0>
__device__ __forceinline__ void mma_m64n256(float (&d)[128], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}

// m64nNk16 for N = 16, 32, 64 (N/2 accumulator registers).
template <int TA, int TB, int R>
__device__ __forceinline__ void mma_m64n(float (&d)[R], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(R == 8 || R == 16 || R == 32, "N = 16, 32 or 64");
  if constexpr (R == 8)
    mma_m64n16<TA, TB>(d, a, b, accumulate);
  else if constexpr (R == 16)
    mma_m64n32<TA, TB>(d, a, b, accumulate);
  else
    mma_m64n64<TA, TB>(d, a, b, accumulate);
}

// Four 8x8 bf16 matrices stored as they are: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i;
// register ri holds the lane's fragment of matrix i (row lane/4, columns 2(lane%4), +1).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
// Four 8x8 bf16 matrices stored transposed: lanes 8i..8i+7 give the addresses of memory rows 0..7 of matrix
// i; register ri holds the lane's fragment of matrix i (row lane/4, columns 2(lane%4), +1, lower column in
// the low half), so memory row c of matrix i receives the matrix's column c.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace deltatune::kernels::wgmma
