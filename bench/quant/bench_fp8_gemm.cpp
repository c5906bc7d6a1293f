// The frozen base's products at 9b shapes (4096 tokens): bf16 weights, FP8 weights dequantized to bf16 before
// a bf16 GEMM (sm_80/86, or kernels: portable), and block-scaled FP8 GEMMs (QuantOps::fp8_gemm, sm_90),
// forward (x·Wᵀ) and backward (dy·W). Median of 7 runs after a warm-up; a table and one JSON line per shape.
//   bench_fp8_gemm [--tokens N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/quant_ops.h"
#include "core/error.h"

using namespace deltatune;

namespace {

double median_ms(Backend& be, const std::function<void()>& f) {
  f();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

Tensor random_host(int64_t rows, int64_t cols, uint64_t seed, float scale) {
  Tensor h = host_tensor({rows, cols}, DType::F32);
  uint64_t z = seed;
  for (int64_t i = 0; i < h.numel(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    h.ptr<float>()[i] = scale * (float(z >> 40) / 8388608.f - 1.f);
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 4096;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--tokens") == 0) T = std::stoll(argv[i + 1]);
  try {
    cuda::CudaBackend be(0, DType::BF16, "auto");
    QuantOps& q = quant_ops(be);
    std::printf("%-14s %-5s %-9s %-9s %-9s %-8s %-8s %s\n", "W [out,in]", "pass", "bf16_ms", "deq_ms",
                "fp8_ms", "fp8/bf16", "TFLOP/s", "fp8 path");
    const std::vector<std::pair<int64_t, int64_t>> shapes{
        {12288, 4096}, {4096, 12288}, {4096, 4096}, {8192, 4096}};
    for (auto [out, in] : shapes) {
      const Tensor wh = random_host(out, in, 1, 0.02f);
      const Tensor w = be.upload(wh, DType::BF16);
      const auto wq = q.upload_quantized(wh, QuantFormat::FP8);
      for (bool fwd : {true, false}) {
        const int64_t k = fwd ? in : out, m = fwd ? out : in;
        const Tensor x = be.upload(random_host(T, k, 2, 1.f), DType::BF16);
        Tensor y = be.alloc({T, m}, DType::BF16);
        const double bf16 = median_ms(be, [&] { be.gemm(x, false, w, fwd, y, 1.f, 0.f); });
        const double deq = median_ms(be, [&] {
          Tensor d = be.alloc(wq->shape, DType::BF16);
          q.dequantize(*wq, d);
          be.gemm(x, false, d, fwd, y, 1.f, 0.f);
        });
        bool taken = true;
        const double fp8 = median_ms(be, [&] { taken = q.fp8_gemm(x, *wq, fwd, y, 0.f) && taken; });
        const double tflops = 2.0 * T * m * k / (fp8 * 1e-3) / 1e12;
        std::printf("%-14s %-5s %-9.3f %-9.3f %-9.3f %-8.2f %-8.0f %s\n",
                    ("[" + std::to_string(out) + "," + std::to_string(in) + "]").c_str(), fwd ? "fwd" : "bwd",
                    bf16, deq, fp8, bf16 / fp8, tflops, taken ? "fp8" : "not taken");
        std::printf(
            "{\"bench\":\"fp8_gemm\",\"out\":%lld,\"in\":%lld,\"tokens\":%lld,\"pass\":\"%s\",\"bf16_ms\":%."
            "4f,"
            "\"dequant_bf16_ms\":%.4f,\"fp8_ms\":%.4f,\"fp8_taken\":%s,\"device\":\"%s\"}\n",
            static_cast<long long>(out), static_cast<long long>(in), static_cast<long long>(T),
            fwd ? "fwd" : "bwd", bf16, deq, fp8, taken ? "true" : "false", be.name().c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fp8_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
