// CpuBackend: construction, memory (alloc/upload/download/copy), elementwise ops, embedding, optimizers.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "backend/adamw_scalars.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

using cpu::f32;

namespace {

constexpr int64_t kElementwiseGrain = 1 << 15;

bool is_float(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }
bool is_int(DType d) { return d == DType::I32 || d == DType::I64 || d == DType::U8; }

float load_f(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.f;
  }
}

void store_f(void* p, DType d, int64_t i, float v) {
  switch (d) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    default: break;
  }
}

int64_t load_i(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<const int64_t*>(p)[i];
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    default: return 0;
  }
}

void store_i(void* p, DType d, int64_t i, int64_t v) {
  switch (d) {
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = v; break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    default: break;
  }
}

// dst[dst_off + i] = convert(src[src_off + i]) for i < n. Floats convert to floats and ints to ints
// (mixing the two kinds is a caller bug and throws).
void convert_elements(void* dst, DType dd, int64_t dst_off, const void* src, DType sd, int64_t src_off, int64_t n) {
  if (dd == sd) {
    const size_t es = dtype_size(dd);
    std::memcpy(static_cast<char*>(dst) + dst_off * es, static_cast<const char*>(src) + src_off * es, n * es);
    return;
  }
  if (is_float(dd) && is_float(sd)) {
    for (int64_t i = 0; i < n; ++i) store_f(dst, dd, dst_off + i, load_f(src, sd, src_off + i));
    return;
  }
  check(is_int(dd) && is_int(sd), std::string("cpu backend: cannot convert ") + dtype_name(sd) + " to " +
                                      dtype_name(dd) + " (float and integer tensors do not mix)");
  for (int64_t i = 0; i < n; ++i) store_i(dst, dd, dst_off + i, load_i(src, sd, src_off + i));
}


}  // namespace

CpuBackend::CpuBackend(int num_threads) : pool_(num_threads), mem_(std::make_shared<CpuMemoryCounters>()) {}

std::string CpuBackend::name() const { return "cpu"; }

std::unique_ptr<Backend> make_cpu_backend(int num_threads) { return std::make_unique<CpuBackend>(num_threads); }

// ---- memory ------------------------------------------------------------------------------------

Tensor CpuBackend::alloc(Shape shape, DType dtype) {
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.device = Device::CPU;
  for (int64_t d : t.shape) check(d >= 0, "cpu backend: alloc with negative dimension " + shape_str(t.shape));
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  // 64-byte alignment keeps rows cache-line aligned for the vectorised loops; aligned_alloc wants a
  // size that is a multiple of the alignment.
  const size_t padded = static_cast<size_t>(std::max<int64_t>(64, (bytes + 63) / 64 * 64));
  void* p = std::aligned_alloc(64, padded);
  check(p != nullptr, "out of host memory allocating " + std::to_string(bytes) + " bytes for a tensor " +
                          shape_str(t.shape));
  auto counters = mem_;
  const int64_t now = counters->allocated.fetch_add(bytes) + bytes;
  int64_t peak = counters->peak.load();
  while (now > peak && !counters->peak.compare_exchange_weak(peak, now)) {
  }
  t.storage = std::shared_ptr<void>(p, [counters, bytes](void* q) {
    counters->allocated.fetch_sub(bytes);
    std::free(q);
  });
  t.data = p;
  return t;
}

void CpuBackend::fill(Tensor& t, float value) {
  const int64_t n = t.numel();
  if (t.dtype == DType::F32) {
    float* p = t.ptr<float>();
    pool_.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
  } else if (is_float(t.dtype)) {
    for (int64_t i = 0; i < n; ++i) store_f(t.data, t.dtype, i, value);
  } else {
    for (int64_t i = 0; i < n; ++i) store_i(t.data, t.dtype, i, static_cast<int64_t>(value));
  }
}

Tensor CpuBackend::upload(const Tensor& host, DType dtype) {
  check(host.device == Device::CPU, "cpu backend: upload expects a host tensor");
  Tensor t = alloc(host.shape, dtype);
  convert_elements(t.data, dtype, 0, host.data, host.dtype, 0, host.numel());
  return t;
}

Tensor CpuBackend::download(const Tensor& t, DType dtype) {
  check(t.device == Device::CPU, "cpu backend: download of a non-CPU tensor");
  Tensor h = host_tensor(t.shape, dtype);
  convert_elements(h.data, dtype, 0, t.data, t.dtype, 0, t.numel());
  return h;
}

void CpuBackend::copy(Tensor& dst, const Tensor& src) {
  cpu::check_same(dst, src, "copy");
  if (dst.data == src.data && dst.dtype == src.dtype) return;
  const int64_t n = src.numel();
  pool_.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    convert_elements(dst.data, dst.dtype, b, src.data, src.dtype, b, e - b);
  });
}

void CpuBackend::copy_cols(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t ncols) {
  const int64_t rows = src.rows(), sc = src.cols(), dc = dst.cols();
  check(dst.rows() == rows && ncols >= 0 && src_col >= 0 && dst_col >= 0 && src_col + ncols <= sc &&
            dst_col + ncols <= dc,
        "cpu backend: copy_cols of " + std::to_string(ncols) + " columns from " + shape_str(src.shape) + " col " +
            std::to_string(src_col) + " to " + shape_str(dst.shape) + " col " + std::to_string(dst_col));
  pool_.parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, ncols)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t r = b; r < e; ++r)
                         convert_elements(dst.data, dst.dtype, r * dc + dst_col, src.data, src.dtype,
                                          r * sc + src_col, ncols);
                     });
}

MemoryStats CpuBackend::memory_stats() const {
  MemoryStats s;
  s.allocated_bytes = mem_->allocated.load();
  s.reserved_bytes = s.allocated_bytes;  // no caching allocator: freed memory goes straight back
  s.peak_allocated_bytes = mem_->peak.load();
  s.total_bytes = 0;
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) s.total_bytes = int64_t(pages) * int64_t(page);  // physical RAM
#endif
  return s;
}

// ---- elementwise -------------------------------------------------------------------------------

void CpuBackend::add(Tensor& y, const Tensor& x, float alpha) {
  cpu::check_same(y, x, "add");
  float* py = f32(y, "add y");
  const float* px = f32(x, "add x");
  pool_.parallel_for(y.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] += alpha * px[i];
  });
}

void CpuBackend::scale(Tensor& y, float alpha) {
  float* py = f32(y, "scale y");
  pool_.parallel_for(y.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] *= alpha;
  });
}

double CpuBackend::sum_squares(const Tensor& x) {
  const float* p = f32(x, "sum_squares x");
  // Fixed blocks summed in order: the result does not depend on the thread count.
  constexpr int64_t kBlock = 1 << 14;
  const int64_t n = x.numel(), nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<size_t>(nb), 0.0);
  pool_.parallel_for(nb, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      double s = 0;
      for (int64_t i = blk * kBlock, end = std::min(n, i + kBlock); i < end; ++i) s += double(p[i]) * p[i];
      part[static_cast<size_t>(blk)] = s;
    }
  });
  double s = 0;
  for (double v : part) s += v;
  return s;
}

bool CpuBackend::all_finite(const Tensor& x) {
  const float* p = f32(x, "all_finite x");
  std::atomic<bool> ok{true};
  pool_.parallel_for(x.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      if (!std::isfinite(p[i])) {
        ok = false;
        return;
      }
  });
  return ok;
}

void CpuBackend::dropout(const Tensor& x, float p, uint64_t seed, Tensor& y) {
  cpu::check_same(y, x, "dropout");
  const float* px = f32(x, "dropout x");
  float* py = f32(y, "dropout y");
  check(p >= 0.f && p <= 1.f, "dropout probability must be in [0, 1], got " + std::to_string(p));
  // x / (1 − p) literally as the contract writes it (not x·(1/(1 − p))), so backends agree bit for bit.
  const float keep_div = 1.f - p;
  pool_.parallel_for(x.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      py[i] = (p < 1.f && dropout_uniform(seed, static_cast<uint64_t>(i)) >= p) ? px[i] / keep_div : 0.f;
  });
}

// ---- embedding ---------------------------------------------------------------------------------

void CpuBackend::embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) {
  const int32_t* pid = cpu::i32(ids, "embedding ids");
  const float* pt = f32(table, "embedding table");
  float* po = f32(out, "embedding out");
  const int64_t T = ids.numel(), V = table.rows(), H = table.cols();
  cpu::check_numel(out, T * H, "embedding out");
  for (int64_t t = 0; t < T; ++t)
    check(pid[t] >= 0 && pid[t] < V, "token id " + std::to_string(pid[t]) + " at position " + std::to_string(t) +
                                         " is outside the embedding table of " + std::to_string(V) + " rows");
  pool_.parallel_for(T, std::max<int64_t>(1, kElementwiseGrain / H), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) std::memcpy(po + t * H, pt + int64_t(pid[t]) * H, H * sizeof(float));
  });
}

// ---- optimizers --------------------------------------------------------------------------------

void CpuBackend::adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int64_t step) {
  cpu::check_same(param, grad, "adamw grad");
  cpu::check_same(param, m, "adamw m");
  cpu::check_same(param, v, "adamw v");
  check(step >= 1, "adamw step counts from 1, got " + std::to_string(step));
  float* pp = f32(param, "adamw param");
  const float* pg = f32(grad, "adamw grad");
  float* pm = f32(m, "adamw m");
  float* pv = f32(v, "adamw v");
  // Mirrors torch.optim.AdamW (_single_tensor_adam, decoupled weight decay): the scalars are formed in
  // double as Python does, then each tensor op runs in fp32 with the scalar rounded to float.
  const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  const float decay = sc.decay, lerp_w = sc.lerp_w, b2 = sc.b2, one_minus_b2 = sc.one_minus_b2;
  const float neg_step_size = sc.neg_step_size, bc2_sqrt = sc.bc2_sqrt;
  const bool wd = sc.weight_decay;
  pool_.parallel_for(param.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float p = pp[i];
      if (wd) p *= decay;
      const float g = pg[i];
      // torch lerp: weight < 0.5 ? self + w·(end − self) : end − (end − self)·(1 − w)
      float mi = pm[i];
      mi = lerp_w < 0.5f ? mi + lerp_w * (g - mi) : g - (g - mi) * (1.f - lerp_w);
      const float vi = pv[i] * b2 + one_minus_b2 * g * g;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      pp[i] = p + neg_step_size * (mi / denom);
      pm[i] = mi;
      pv[i] = vi;
    }
  });
}

void CpuBackend::sgd_step(Tensor& param, const Tensor& grad, float lr, float weight_decay) {
  cpu::check_same(param, grad, "sgd grad");
  float* pp = f32(param, "sgd param");
  const float* pg = f32(grad, "sgd grad");
  pool_.parallel_for(param.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pp[i] -= lr * (pg[i] + weight_decay * pp[i]);
  });
}

}  // namespace deltatune
