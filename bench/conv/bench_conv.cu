// The bf16 conv1d+SiLU row-piece kernels (kernels/conv/conv_rows.cuh) at the GDN layer's shapes, for each
// (channels, tokens) a thread: median of 20 launches (CUDA events) and the DRAM rate of the bytes the op must
// move (forward x in, y out; backward x and dy in, dx out). Every variant runs the same arithmetic, so its
// outputs must equal the first variant's bit for bit (checked, also on a packed layout of 5 sequences).
//   bench_conv            (under ncu -k regex:conv_ the kernel names carry the variant)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../common/cuda_check.h"
#include "conv/conv_rows.cuh"

namespace {
using namespace deltatune::kernels;
using bf16 = __nv_bfloat16;

struct Shape {
  const char* name;
  int64_t T;
  std::vector<int64_t> widths;  // q | k | v
};
struct Bufs {
  bf16 *x, *dy, *y, *dx;
  float* w;
  int32_t* cu;
  int nseq;
  ColParts<KOut> yp;
  ColParts<KIn> gp;
};

template <int CH, int TOK>
void fwd(const Bufs& b, int64_t T, int64_t C) {
  conv_rows::conv_fwd_rows_kernel<4, CH, TOK><<<conv_rows::rows_grid<CH, TOK>(T, C),
                                                 dim3(conv_rows::kBlockX, conv_rows::kBlockY)>>>(
      b.x, KIn{b.w, KType::F32}, b.cu, b.nseq, b.yp, T, C);
}
template <int CH, int TOK>
void bwd(const Bufs& b, int64_t T, int64_t C) {
  conv_rows::conv_bwd_rows_kernel<4, CH, TOK><<<conv_rows::rows_grid<CH, TOK>(T, C),
                                                 dim3(conv_rows::kBlockX, conv_rows::kBlockY)>>>(
      b.gp, b.x, KIn{b.w, KType::F32}, b.cu, b.nseq, b.dx, T, C);
}

float median_us(void (*f)(const Bufs&, int64_t, int64_t), const Bufs& b, int64_t T, int64_t C) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  f(b, T, C);
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(e0));
    f(b, T, C);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<char> grab(const Bufs& b, int64_t T, int64_t C, bool fwd_out, const std::vector<int64_t>& widths) {
  std::vector<char> h(T * C * 2);
  if (!fwd_out) {
    CK(cudaMemcpy(h.data(), b.dx, h.size(), cudaMemcpyDeviceToHost));
    return h;
  }
  size_t off = 0;
  for (size_t i = 0; i < widths.size(); ++i) {
    CK(cudaMemcpy(h.data() + off, b.yp.part[i].p, T * widths[i] * 2, cudaMemcpyDeviceToHost));
    off += T * widths[i] * 2;
  }
  return h;
}

struct Variant {
  const char* name;
  void (*f)(const Bufs&, int64_t, int64_t);
  bool is_fwd;
};

}  // namespace

int main() {
  const Variant vars[] = {
      {"fwd ch8 tok8", fwd<8, 8>, true},    {"fwd ch4 tok8", fwd<4, 8>, true},
      {"fwd ch4 tok16", fwd<4, 16>, true},  {"fwd ch8 tok4", fwd<8, 4>, true},
      {"fwd ch2 tok16", fwd<2, 16>, true},  {"bwd ch4 tok8", bwd<4, 8>, false},
      {"bwd ch4 tok16", bwd<4, 16>, false}, {"bwd ch8 tok8", bwd<8, 8>, false},
      {"bwd ch2 tok16", bwd<2, 16>, false},
  };
  const Shape shapes[] = {{"2b", 4096, {2048, 2048, 2048}}, {"9b", 4096, {2048, 2048, 4096}}};
  for (const Shape& s : shapes) {
    const int64_t T = s.T;
    int64_t C = 0;
    for (int64_t w : s.widths) C += w;
    Bufs b{};
    CK(cudaMalloc(&b.x, T * C * 2));
    CK(cudaMalloc(&b.dy, T * C * 2));
    CK(cudaMalloc(&b.dx, T * C * 2));
    CK(cudaMalloc(&b.w, C * 4 * 4));
    CK(cudaMalloc(&b.cu, 8 * 4));
    std::vector<uint16_t> hx(T * C);
    uint32_t r = 12345;
    for (auto& v : hx) {
      r = r * 1664525u + 1013904223u;
      const float f = (int((r >> 9) & 0xffff) - 32768) / 16384.f;  // [-2, 2)
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = uint16_t(bits >> 16);
    }
    CK(cudaMemcpy(b.x, hx.data(), T * C * 2, cudaMemcpyHostToDevice));
    std::reverse(hx.begin(), hx.end());
    CK(cudaMemcpy(b.dy, hx.data(), T * C * 2, cudaMemcpyHostToDevice));
    std::vector<float> hw(C * 4);
    for (size_t i = 0; i < hw.size(); ++i) hw[i] = 0.5f * float(int(i * 2654435761u % 1000) - 500) / 500.f;
    CK(cudaMemcpy(b.w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
    int64_t end = 0;
    std::vector<bf16*> ybufs, gbufs;
    for (size_t i = 0; i < s.widths.size(); ++i) {
      bf16 *yy, *gg;
      CK(cudaMalloc(&yy, T * s.widths[i] * 2));
      CK(cudaMalloc(&gg, T * s.widths[i] * 2));
      CK(cudaMemcpy2D(gg, s.widths[i] * 2, b.dy + end, C * 2, s.widths[i] * 2, T, cudaMemcpyDeviceToDevice));
      end += s.widths[i];
      b.yp.part[i] = KOut{yy, KType::BF16}, b.yp.end[i] = end;
      b.gp.part[i] = KIn{gg, KType::BF16}, b.gp.end[i] = end;
    }
    b.yp.n = b.gp.n = int(s.widths.size());
    const int32_t layouts[2][6] = {{0, int32_t(T)}, {0, 1, 1000, 1001, 2048, int32_t(T) - 5}};
    const int nseqs[2] = {1, 5};
    std::vector<char> ref[2][2];  // [layout][fwd?]
    for (int L = 1; L >= 0; --L) {
      std::vector<int32_t> cu(layouts[L], layouts[L] + nseqs[L] + 1);
      if (L == 1) cu.back() = int32_t(T);
      CK(cudaMemcpy(b.cu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
      b.nseq = nseqs[L];
      for (const Variant& v : vars) {
        const float us = L == 0 ? median_us(v.f, b, T, C) : 0.f;
        if (L == 1) v.f(b, T, C);
        CK(cudaDeviceSynchronize());
        std::vector<char> out = grab(b, T, C, v.is_fwd, s.widths);
        std::vector<char>& rr = ref[L][v.is_fwd];
        bool same = true;
        if (rr.empty()) rr = out;
        else same = rr == out;
        if (L == 0) {
          const double bytes = double(T) * C * 2 * (v.is_fwd ? 2 : 3);
          std::printf("%s %-14s %7.1f us %6.2f TB/s  %s\n", s.name, v.name, us, bytes / us * 1e-6,
                      same ? "bits = first" : "BITS DIFFER");
        } else if (!same) {
          std::printf("%s %-14s packed layout: BITS DIFFER\n", s.name, v.name);
        }
      }
    }
    for (void* p : {static_cast<void*>(b.x), static_cast<void*>(b.dy), static_cast<void*>(b.dx),
                    static_cast<void*>(b.w), static_cast<void*>(b.cu)})
      CK(cudaFree(p));
    for (int i = 0; i < b.yp.n; ++i) {
      CK(cudaFree(const_cast<void*>(b.yp.part[i].p)));
      CK(cudaFree(const_cast<void*>(b.gp.part[i].p)));
    }
  }
  std::printf("done\n");
  return 0;
}
