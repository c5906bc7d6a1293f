#include "lora/lora_b_layout.h"

#include <string>

#include "core/error.h"

namespace deltatune {

Shape lora_b_backend_shape(const LoraModule& m) {
  if (m.experts > 0) return {m.experts, m.out, m.r};
  return {m.out, m.r};
}

Shape lora_b_host_shape(const LoraModule& m) { return {m.out, m.experts > 0 ? m.r * m.experts : int64_t(m.r)}; }

Tensor lora_b_upload(Backend& be, const LoraModule& m, const Tensor& host, const std::string& what) {
  const int64_t E = m.experts, r = m.r;
  const Shape peft = lora_b_host_shape(m);
  check(host.shape == peft, m.path + "." + what + ": shape " + shape_str(host.shape) + ", expected " +
                                shape_str(peft) + " (PEFT's layout)");
  Tensor up = be.upload(host, DType::F32);
  if (E == 0) return up;
  Tensor grouped = be.alloc({E, m.out, r}, DType::F32);
  be.permute3(up, m.out, r, E, 2, 0, 1, grouped);  // [out, r, E] -> [E, out, r]
  return grouped;
}

Tensor lora_b_download(Backend& be, const LoraModule& m, const Tensor& t) {
  const Shape want = lora_b_backend_shape(m);
  check(t.shape == want, "internal: " + m.path + " B-shaped tensor " + shape_str(t.shape) + " on the backend, expected " +
                             shape_str(want));
  if (m.experts == 0) return be.download(t, DType::F32);
  const int64_t E = m.experts, r = m.r;
  Tensor peft = be.alloc({m.out, r * E}, DType::F32);
  be.permute3(t, E, m.out, r, 1, 2, 0, peft);  // [E, out, r] -> [out, r, E]
  return be.download(peft, DType::F32);
}

LoraModule lora_module_download(Backend& be, const LoraModule& m, bool with_moments) {
  LoraModule host = m;
  host.Ac = host.Bc = host.gA = host.gB = Tensor{};
  host.A = be.download(m.A, DType::F32);
  host.B = lora_b_download(be, m, m.B);
  for (int i = 0; i < 4; ++i) {
    const Tensor& t = m.moment(i);
    host.moment(i) = !with_moments || !t.defined() ? Tensor{}
                     : i < 2                       ? be.download(t, DType::F32)
                                                   : lora_b_download(be, m, t);
  }
  return host;
}

}  // namespace deltatune
