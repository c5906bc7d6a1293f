// libFuzzer: tokenizer.json loading, then a round of encode/decode with whatever loaded (a malformed
// vocabulary or merge list must not crash encoding). Bad input must end in deltatune::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;  // the loader's cost is in the structure, not in sheer size
  try {
    const auto tok = deltatune::Tokenizer::from_json_string(
        std::string(reinterpret_cast<const char*>(data), size), "tokenizer.json");
    const auto ids = tok.encode("Hello, world! 123  \xe4\xbd\xa0\xe5\xa5\xbd <|im_end|>\n\xff");
    tok.decode(ids);
    tok.decode(ids, true);
  } catch (const deltatune::Error&) {
  }
  return 0;
}
