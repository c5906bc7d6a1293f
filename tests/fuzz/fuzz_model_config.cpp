// libFuzzer: config.json of a Hugging Face checkpoint. Bad input must end in deltatune::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    deltatune::model_config_parse_string(std::string(reinterpret_cast<const char*>(data), size),
                                         "config.json");
  } catch (const deltatune::Error&) {
  }
  return 0;
}
