#include "core/quantized.h"

#include "core/error.h"

namespace deltatune {

const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::None: return "none";
    case QuantFormat::FP8: return "fp8";
    case QuantFormat::NF4: return "nf4";
  }
  return "?";
}

QuantFormat quant_format_from_name(const std::string& name, const std::string& what) {
  if (name == "none") return QuantFormat::None;
  if (name == "fp8") return QuantFormat::FP8;
  if (name == "nf4") return QuantFormat::NF4;
  throw Error(what + ": '" + name + "' is not a base quantization (expected none, fp8 or nf4)");
}

}  // namespace deltatune
