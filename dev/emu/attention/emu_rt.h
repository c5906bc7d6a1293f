// Host emulation of the CUDA execution model used by the tensor-core attention kernels: one std::thread per
// CUDA thread of a block, block barriers, named barriers (bar.arrive / bar.sync), warp barriers for
// warp-collective operations (shuffles, ldmatrix, mma) and warpgroup barriers for wgmma, shared memory as a
// host buffer. Checks kernel index math and fragment layouts without a GPU; not
// part of the build (see attention_emu.cpp).
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace emu {

struct Block {
  int nthreads = 0;
  unsigned char* smem = nullptr;
  size_t smem_size = 0;
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  std::vector<std::unique_ptr<std::barrier<>>> wg_bar;  // per warpgroup of 4 warps
  std::unique_ptr<std::barrier<>> named[16];            // bar.sync / bar.arrive ids, made by the first user
  std::mutex named_mu;
  // per-lane exchange slots of each warp (8 words per lane)
  std::vector<uint32_t> slots;
};

struct ThreadCtx {
  Block* block = nullptr;
  dim3 tid, bid, bdim, gdim;
};
inline thread_local ThreadCtx ctx;

inline int lane() { return static_cast<int>(ctx.tid.x & 31); }
inline int warp() { return static_cast<int>(ctx.tid.x >> 5); }
inline uint32_t* slot(int w, int l) { return &ctx.block->slots[(size_t(w) * 32 + l) * 8]; }
inline void warp_sync() { ctx.block->warp_bar[warp()]->arrive_and_wait(); }
inline void wg_sync() { ctx.block->wg_bar[warp() / 4]->arrive_and_wait(); }
inline std::barrier<>& named_barrier(int id, int n) {
  std::lock_guard<std::mutex> lock(ctx.block->named_mu);
  auto& b = ctx.block->named[id];
  if (!b) b = std::make_unique<std::barrier<>>(n);
  return *b;
}

// Runs kernel(args...) for every block of grid with `threads` threads each and `smem` bytes of shared memory.
// `smem_base` is the kernel's extern __shared__ array, defined by the including file (blocks run one at a time).
template <class F>
void launch(dim3 grid, int threads, unsigned char* smem_base, size_t smem, F&& body) {
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block b;
      b.nthreads = threads;
      b.smem = smem_base;
      b.smem_size = smem;
      std::memset(smem_base, 0xA5, smem);  // garbage, like real shared memory
      b.bar = std::make_unique<std::barrier<>>(threads);
      for (int w = 0; w < threads / 32; ++w) b.warp_bar.push_back(std::make_unique<std::barrier<>>(32));
      for (int w = 0; w < threads / 128; ++w) b.wg_bar.push_back(std::make_unique<std::barrier<>>(128));
      b.slots.assign(size_t(threads) * 8, 0);
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          ctx.block = &b;
          ctx.tid = dim3(t, 0, 0);
          ctx.bid = dim3(bx, by, bz);
          ctx.bdim = dim3(threads, 1, 1);
          ctx.gdim = grid;
          body();
        });
      for (auto& t : ts) t.join();
    }
}

template <class T> T shfl_xor(T v, int o) {
  static_assert(sizeof(T) <= 8);
  uint32_t* s = slot(warp(), lane());
  std::memcpy(s, &v, sizeof(T));
  warp_sync();
  T r;
  std::memcpy(&r, slot(warp(), lane() ^ o), sizeof(T));
  warp_sync();
  return r;
}

}  // namespace emu

#define threadIdx (emu::ctx.tid)
#define blockIdx (emu::ctx.bid)
#define blockDim (emu::ctx.bdim)
#define gridDim (emu::ctx.gdim)
inline void __syncthreads() { emu::ctx.block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
template <class T> T __shfl_xor_sync(unsigned, T v, int o) { return emu::shfl_xor(v, o); }
#define __launch_bounds__(...)
#define __grid_constant__
using std::max;
using std::min;
// The device's rsqrtf is an approximation (MUFU.RSQ); the emulation and its host references share this one.
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
