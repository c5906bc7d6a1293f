// Runs the MoE dispatch count and place kernels (kernels/moe/dispatch.cu) on the host through the CUDA
// emulation of dev/emu/attention, with the warp primitives they use (__match_any_sync, shared atomics)
// emulated here, and checks the result against a plain stable sort. The one-block scan between them is done
// on the host exactly as dispatch_scan_kernel defines it. Not part of the build:
//   g++ -std=c++20 -O2 -w -DDT_ATTN_EMU -I kernels -I dev -I /usr/local/cuda/include \
//       dev/emu/moe/dispatch_emu.cpp -o /tmp/dispatch_emu -lpthread && /tmp/dispatch_emu
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emu/attention/emu_rt.h"

// Warp primitives of dispatch.cu, emulated through the per-lane exchange slots.
inline unsigned __match_any_sync(unsigned, int v) {
  const int w = emu::warp(), l = emu::lane();
  emu::slot(w, l)[0] = static_cast<uint32_t>(v);
  emu::warp_sync();
  unsigned m = 0;
  for (int i = 0; i < 32; ++i) m |= (emu::slot(w, i)[0] == static_cast<uint32_t>(v) ? 1u : 0u) << i;
  emu::warp_sync();
  return m;
}
template <class T> T __shfl_up_sync(unsigned, T v, int o) {
  const int w = emu::warp(), l = emu::lane();
  std::memcpy(emu::slot(w, l), &v, sizeof(T));
  emu::warp_sync();
  T r = v;
  if (l >= o) std::memcpy(&r, emu::slot(w, l - o), sizeof(T));
  emu::warp_sync();
  return r;
}
#define __popc(x) __builtin_popcount(x)
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }

namespace deltatune::kernels {
namespace {
alignas(16) int32_t cnt[8 * 1024];
alignas(16) int32_t next[8 * 1024];
}  // namespace
}  // namespace deltatune::kernels
#include "moe/dispatch.cu"

using namespace deltatune::kernels;

namespace {

int failures = 0;

void check_case(const std::string& name, const std::vector<int32_t>& idx, int K, int E) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t units = (n + kUnit - 1) / kUnit;
  std::vector<int32_t> hist(size_t(units * E), -5), offsets(E + 1, -5), rt(n, -5), rs(n, -5), sr(n, -5);
  const dim3 grid(static_cast<unsigned>((units + kWarps - 1) / kWarps));
  emu::launch(grid, kWarps * 32, reinterpret_cast<unsigned char*>(cnt), sizeof(int32_t) * kWarps * E,
              [&] { dispatch_count_kernel(idx.data(), n, E, units, hist.data()); });
  // dispatch_scan_kernel on the host.
  std::vector<int32_t> total(E, 0);
  for (int e = 0; e < E; ++e)
    for (int64_t u = 0; u < units; ++u) {
      const int c = hist[u * E + e];
      hist[u * E + e] = total[e];
      total[e] += c;
    }
  offsets[0] = 0;
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + total[e];
  emu::launch(grid, kWarps * 32, reinterpret_cast<unsigned char*>(next), sizeof(int32_t) * kWarps * E, [&] {
    dispatch_place_kernel(idx.data(), n, K, E, units, hist.data(), offsets.data(), rt.data(), rs.data(), sr.data());
  });
  // Reference: stable sort of the slots by expert.
  std::vector<int32_t> want;
  for (int e = 0; e < E; ++e)
    for (int64_t s = 0; s < n; ++s)
      if (idx[s] == e) want.push_back(static_cast<int32_t>(s));
  int64_t bad = 0;
  for (int64_t r = 0; r < n; ++r)
    bad += rs[r] != want[r] || rt[r] != want[r] / K || sr[want[r]] != r;
  int64_t bad_off = 0;
  for (int e = 0, acc = 0; e < E; ++e) {
    bad_off += offsets[e] != acc;
    for (int32_t v : idx) acc += v == e;
  }
  const bool ok = bad == 0 && bad_off == 0 && offsets[E] == n;
  failures += !ok;
  std::printf("%-4s %-44s wrong rows %lld, wrong offsets %lld\n", ok ? "ok" : "FAIL", name.c_str(), (long long)bad,
              (long long)bad_off);
}

}  // namespace

int main() {
  std::mt19937 rng(3);
  auto random_idx = [&](int64_t n, int E, int empty_every) {
    std::uniform_int_distribution<int> u(0, E - 1);
    std::vector<int32_t> v(n);
    for (auto& x : v) {
      x = u(rng);
      if (empty_every && x % empty_every == 1) x = 0;
    }
    return v;
  };
  check_case("T=700 K=3 E=37 (several units, empty experts)", random_idx(2100, 37, 5), 3, 37);
  check_case("T=1000 K=8 E=64 (4 blocks)", random_idx(8000, 64, 0), 8, 64);
  check_case("T=129 K=2 E=3 all on expert 2", std::vector<int32_t>(258, 2), 2, 3);
  check_case("T=5 K=1 E=300 (fewer slots than a warp)", random_idx(5, 300, 0), 1, 300);
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
