// Gated DeltaNet core on one GPU: our gdn_fwd / gdn_bwd (L2 norm of q and k included, as FLA's
// use_qk_l2norm_in_kernel) at Qwen3.5-9B shapes (HK 16, HV 32, dk = dv = 128) for packed rows of
// sequences of --seq tokens. Prints a table and one JSON line per size: median ms of forward and of
// forward + backward, achieved TFLOP/s, and the allocator's peak above the inputs (sizes run in increasing
// order, so the running peak is the largest size's) and what the forward leaves allocated for the backward
// ("saved": besides the inputs and the output, which the caller owns).
//
//   bench_gdn [--tokens 4096,8192,16384,32768] [--seq 4096] [--hk 16] [--hv 32] [--iters 10]
//             [--keep none|all|states] [--check 1]
//
// --keep none (0, default): gdn_fwd, then gdn_bwd recomputes the forward's chunk quantities (nothing kept
// between the passes but the inputs). --keep all (1): gdn_fwd_keep keeps them (W, M, T, chunk states, V')
// and gdn_bwd_saved uses them, as a training step does for a layer it recomputes under checkpointing.
// --keep states: only the chunk-start states and each chunk's solve T are kept; the backward recomputes the
// rest chunk-parallel from them (no serial scan, no solve). The peak then includes what is kept.
//
// --check 1: instead of timing, runs each size once on this backend and once on the portable kernels (mma.sync,
// no Hopper kernels) over the same inputs and prints, per output, the largest difference, the rms difference over
// the rms of the portable result, and for o where its largest difference lies (token, chunk row, head, column).
//
// FLOPs (chunk 64, per value head and token, the same count for FLA): forward ≈ 4·dk·dv (state read,
// W·S, state update K̂ᵀV') + 2·64·(dk + dv) (intra-chunk scores and M·V') + prep ≈ 64·dk·2; backward ≈ 2×
// forward. This is the usual "useful work" convention, not our kernels' exact instruction count.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_kernels_setting.h"
#include "core/error.h"

using namespace deltatune;

namespace {

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> r;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) r.push_back(std::stoll(x));
  return r;
}

Tensor host_uniform(Shape shape, float lo, float hi, std::mt19937& rng) {
  Tensor t = host_tensor(std::move(shape), DType::F32);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

SeqLayout seq_layout(Backend& b, const std::vector<int32_t>& cu) {
  SeqLayout s;
  s.host_cu_seqlens = cu;
  Tensor hc = host_tensor({static_cast<int64_t>(cu.size())}, DType::I32);
  Tensor hp = host_tensor({cu.back()}, DType::I32);
  for (size_t n = 0; n < cu.size(); ++n) hc.ptr<int32_t>()[n] = cu[n];
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int32_t t = cu[n]; t < cu[n + 1]; ++t) hp.ptr<int32_t>()[t] = t - cu[n];
    s.max_seqlen = std::max(s.max_seqlen, cu[n + 1] - cu[n]);
  }
  s.cu_seqlens = b.upload(hc, DType::I32);
  s.positions = b.upload(hp, DType::I32);
  return s;
}

// Largest |a − b|, rms(a − b) / rms(b) and the flat index of the largest difference (F32 host tensors).
struct Diff {
  double max_abs = 0, rel_rms = 0;
  int64_t at = 0;
};
Diff diff(const Tensor& a, const Tensor& b) {
  Diff d;
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.ptr<float>()[i], y = b.ptr<float>()[i], e = std::abs(x - y);
    num += (x - y) * (x - y), den += y * y;
    if (!(e <= d.max_abs)) d.max_abs = e, d.at = i;
  }
  d.rel_rms = std::sqrt(num / std::max(den, 1e-30));
  return d;
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes{4096, 8192, 16384, 32768};
  int64_t seq = 4096, HK = 16, HV = 32, iters = 10;
  bool keep = false, check = false;
  Backend::GdnKeep keep_what = Backend::GdnKeep::All;
  const int dk = 128, dv = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") sizes = parse_list(v);
    else if (a == "--seq") seq = std::stoll(v);
    else if (a == "--hk") HK = std::stoll(v);
    else if (a == "--hv") HV = std::stoll(v);
    else if (a == "--iters") iters = std::stoll(v);
    else if (a == "--check") check = v != "0";
    else if (a == "--keep") {
      if (v == "0" || v == "none") keep = false;
      else if (v == "1" || v == "all") keep = true, keep_what = Backend::GdnKeep::All;
      else if (v == "states") keep = true, keep_what = Backend::GdnKeep::States;
      else {
        std::fprintf(stderr, "--keep: expected none, all or states, got %s\n", v.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto be = make_cuda_backend();
    std::mt19937 rng(1);
    std::printf("%8s %6s %10s %10s %12s %12s %10s %10s\n", "tokens", "seqs", "fwd ms", "fwd+bwd ms", "fwd TFLOP/s",
                "f+b TFLOP/s", "peak MiB", "saved MiB");
    for (int64_t T : sizes) {
      std::vector<int32_t> cu{0};
      while (cu.back() < T) cu.push_back(static_cast<int32_t>(std::min<int64_t>(T, cu.back() + seq)));
      SeqLayout layout = seq_layout(*be, cu);
      const float scale = 1.f / std::sqrt(float(dk));
      Tensor q = be->upload(host_uniform({T, HK, dk}, -1, 1, rng), DType::BF16);
      Tensor k = be->upload(host_uniform({T, HK, dk}, -1, 1, rng), DType::BF16);
      Tensor v = be->upload(host_uniform({T, HV, dv}, -1, 1, rng), DType::BF16);
      Tensor g = be->upload(host_uniform({T, HV}, -0.5f, 0.f, rng), DType::F32);
      Tensor beta = be->upload(host_uniform({T, HV}, 0.1f, 0.9f, rng), DType::BF16);
      Tensor dout = be->upload(host_uniform({T, HV, dv}, -1, 1, rng), DType::BF16);
      Tensor o = be->alloc({T, HV, dv}, DType::BF16);
      Tensor dq = be->alloc({T, HK, dk}, DType::BF16), dkk = be->alloc({T, HK, dk}, DType::BF16);
      Tensor dvv = be->alloc({T, HV, dv}, DType::BF16), dg = be->alloc({T, HV}, DType::F32);
      Tensor db = be->alloc({T, HV}, DType::BF16);
      if (check) {
        auto ref = make_cuda_backend(0, DType::BF16, "portable");
        SeqLayout rl = seq_layout(*ref, cu);
        auto run = [&](Backend& b, const SeqLayout& l, Backend::GdnKeep what) {
          auto up = [&](const Tensor& t, DType dt) { return b.upload(be->download(t, DType::F32), dt); };
          Tensor bq = up(q, DType::BF16), bk = up(k, DType::BF16), bv = up(v, DType::BF16), bg = up(g, DType::F32);
          Tensor bb = up(beta, DType::BF16), bd = up(dout, DType::BF16);
          Tensor bo = b.alloc({T, HV, dv}, DType::BF16), bdq = b.alloc({T, HK, dk}, DType::BF16);
          Tensor bdk = b.alloc({T, HK, dk}, DType::BF16), bdv = b.alloc({T, HV, dv}, DType::BF16);
          Tensor bdg = b.alloc({T, HV}, DType::F32), bdb = b.alloc({T, HV}, DType::BF16);
          auto sv = b.gdn_fwd_keep(bq, bk, bv, bg, bb, l, scale, bo, what);
          b.gdn_bwd_saved(sv.get(), bd, bq, bk, bv, bg, bb, l, scale, bdq, bdk, bdv, bdg, bdb);
          std::vector<Tensor> r;
          for (const Tensor* t : {&bo, &bdq, &bdk, &bdv, &bdg, &bdb}) r.push_back(b.download(*t, DType::F32));
          return r;
        };
        for (Backend::GdnKeep what : {Backend::GdnKeep::States, Backend::GdnKeep::All}) {
          const auto x = run(*be, layout, what), y = run(*ref, rl, what);
          const char* names[] = {"o", "dq", "dk", "dv", "dg", "dbeta"};
          for (int i = 0; i < 6; ++i) {
            const Diff d = diff(x[i], y[i]);
            std::printf("check T=%lld HV=%lld keep=%s %-5s max_abs %.4g rel_rms %.4g", static_cast<long long>(T),
                        static_cast<long long>(HV), what == Backend::GdnKeep::States ? "states" : "all", names[i],
                        d.max_abs, d.rel_rms);
            if (i == 0 || i == 3) {
              const int64_t t = d.at / (HV * dv), h = (d.at / dv) % HV, c = d.at % dv;
              std::printf(" at t=%lld (row %lld) h=%lld col=%lld: %.4f vs %.4f", static_cast<long long>(t),
                          static_cast<long long>(t % 64), static_cast<long long>(h), static_cast<long long>(c),
                          x[i].ptr<float>()[d.at], y[i].ptr<float>()[d.at]);
            }
            std::printf("\n");
          }
        }
        continue;
      }
      std::vector<double> fwd, both;
      const int64_t base = be->memory_stats().allocated_bytes;
      int64_t peak = 0, saved_bytes = 0;
      for (int64_t it = 0; it < iters + 2; ++it) {
        be->synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        std::shared_ptr<Backend::GdnSaved> saved;
        if (keep) saved = be->gdn_fwd_keep(q, k, v, g, beta, layout, scale, o, keep_what);
        else be->gdn_fwd(q, k, v, g, beta, layout, scale, o);
        be->synchronize();
        const auto t1 = std::chrono::steady_clock::now();
        saved_bytes = std::max(saved_bytes, be->memory_stats().allocated_bytes - base);
        be->gdn_bwd_saved(saved.get(), dout, q, k, v, g, beta, layout, scale, dq, dkk, dvv, dg, db);
        saved.reset();
        be->synchronize();
        const auto t2 = std::chrono::steady_clock::now();
        peak = std::max(peak, be->memory_stats().peak_allocated_bytes - base);
        if (it < 2) continue;  // warm-up
        fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        both.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      }
      const double per_tok_head = 4.0 * dk * dv + 2.0 * 64 * (dk + dv) + 2.0 * 64 * dk;
      const double ffl = per_tok_head * double(T) * double(HV), bfl = 3 * ffl;
      const double mf = median_ms(fwd), mb = median_ms(both);
      std::printf("%8lld %6zu %10.3f %10.3f %12.1f %12.1f %10.1f %10.1f\n", static_cast<long long>(T), cu.size() - 1,
                  mf, mb, ffl / mf * 1e-9, bfl / mb * 1e-9, double(peak) / (1 << 20), double(saved_bytes) / (1 << 20));
      std::printf("{\"bench\": \"gdn\", \"impl\": \"%s\", \"tokens\": %lld, \"seq\": %lld, \"hk\": %lld, "
                  "\"hv\": %lld, \"fwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"fwd_tflops\": %.2f, \"fwd_bwd_tflops\": "
                  "%.2f, \"peak_mib\": %.1f, \"saved_mib\": %.1f}\n",
                  !keep ? "deltatune" : keep_what == Backend::GdnKeep::All ? "deltatune_keep" : "deltatune_states",
                  static_cast<long long>(T), static_cast<long long>(seq),
                  static_cast<long long>(HK),
                  static_cast<long long>(HV), mf, mb, ffl / mf * 1e-9, bfl / mb * 1e-9, double(peak) / (1 << 20),
                  double(saved_bytes) / (1 << 20));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gdn: %s\n", e.what());
    return 1;
  }
  return 0;
}
