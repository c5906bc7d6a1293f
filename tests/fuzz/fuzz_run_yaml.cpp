// libFuzzer: the run YAML parser. Bad input must end in deltatune::Error; anything that parses must come
// back unchanged through the canonical writer (a property, not just "no crash").
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "deltatune/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  deltatune::RunConfig cfg;
  try {
    cfg = deltatune::run_config_from_yaml_string(yaml);
  } catch (const deltatune::Error&) {
    return 0;
  }
  const std::string canonical = deltatune::run_config_to_yaml(cfg);
  if (!(deltatune::run_config_from_yaml_string(canonical) == cfg)) std::abort();
  return 0;
}
