#include "dist/expert_lora.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace deltatune {
namespace {

// A-shaped [r·E, in]: expert e's r rows are consecutive.
Tensor slice_a(const Tensor& a, int64_t r, int64_t first, int64_t per) {
  const Tensor s = a.slice(first * r, (first + per) * r);
  Tensor out = host_tensor(s.shape, DType::F32);
  std::memcpy(out.data, s.data, s.nbytes());
  return out;
}

// B-shaped [out, r·E]: column k·E + e.
Tensor slice_b(const Tensor& b, int64_t r, int64_t E, int64_t first, int64_t per) {
  const int64_t out_dim = b.dim(0);
  Tensor out = host_tensor({out_dim, r * per}, DType::F32);
  for (int64_t o = 0; o < out_dim; ++o)
    for (int64_t k = 0; k < r; ++k)
      std::memcpy(out.ptr<float>() + o * r * per + k * per, b.ptr<float>() + o * r * E + k * E + first,
                  sizeof(float) * static_cast<size_t>(per));
  return out;
}

}  // namespace

LoraModule expert_lora_slice(const LoraModule& host, int rank, int world) {
  check(host.experts > 0 && world >= 1 && host.experts % world == 0,
        "expert parallel: " + host.path + " has " + std::to_string(host.experts) + " experts, which do not divide over " +
            std::to_string(world) + " GPUs");
  const int64_t E = host.experts, per = E / world, first = rank * per, r = host.r;
  LoraModule s = host;
  s.experts = per;
  s.A = slice_a(host.A, r, first, per);
  s.B = slice_b(host.B, r, E, first, per);
  s.Ac = s.Bc = s.gA = s.gB = Tensor{};
  for (int i = 0; i < 4; ++i) {
    const Tensor& t = host.moment(i);
    s.moment(i) = !t.defined() ? Tensor{} : i < 2 ? slice_a(t, r, first, per) : slice_b(t, r, E, first, per);
  }
  return s;
}

LoraModule expert_lora_join(const std::vector<LoraModule>& slices) {
  check(!slices.empty(), "internal: expert_lora_join of no slices");
  const int64_t per = slices[0].experts, W = static_cast<int64_t>(slices.size()), E = per * W, r = slices[0].r;
  LoraModule full = slices[0];
  full.experts = E;
  full.Ac = full.Bc = full.gA = full.gB = Tensor{};
  auto join = [&](auto get, bool a_shaped) {
    const Tensor& s0 = *get(const_cast<LoraModule&>(slices[0]));
    Tensor out = host_tensor(a_shaped ? Shape{r * E, s0.dim(1)} : Shape{s0.dim(0), r * E}, DType::F32);
    for (int64_t w = 0; w < W; ++w) {
      const Tensor& s = *get(const_cast<LoraModule&>(slices[static_cast<size_t>(w)]));
      check(s.defined() && s.shape == s0.shape && s.device == Device::CPU,
            "internal: expert LoRA slices of " + full.path + " differ");
      if (a_shaped) {
        std::memcpy(out.ptr<float>() + w * s.numel(), s.ptr<float>(), s.nbytes());
        continue;
      }
      for (int64_t o = 0; o < s.dim(0); ++o)
        for (int64_t k = 0; k < r; ++k)
          std::memcpy(out.ptr<float>() + o * r * E + k * E + w * per, s.ptr<float>() + o * r * per + k * per,
                      sizeof(float) * static_cast<size_t>(per));
    }
    return out;
  };
  full.A = join([](LoraModule& m) { return &m.A; }, true);
  full.B = join([](LoraModule& m) { return &m.B; }, false);
  for (int i = 0; i < 4; ++i) {
    bool all = true;
    for (const LoraModule& s : slices) all = all && s.moment(i).defined();
    full.moment(i) = all ? join([i](LoraModule& m) { return &m.moment(i); }, i < 2) : Tensor{};
  }
  return full;
}

void expert_lora_keep_slice(LoraAdapter& host, int rank, int world) {
  for (LoraModule& m : host.modules)
    if (is_expert_lora(m)) m = expert_lora_slice(m, rank, world);
}

}  // namespace deltatune
