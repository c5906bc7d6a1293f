// Options shared by `deltatune chat` and `deltatune generate`: model, adapter, backend and sampling flags.
#pragma once
#include <set>
#include <stdexcept>
#include <string>

#include "args.h"
#include "deltatune/generate.h"

namespace deltatune::cli {

// A command line that cannot be used; the command prints it with its usage line and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Value options and flags every generation command takes (add a command's own to these).
std::set<std::string> generation_value_options();
std::set<std::string> generation_flag_options();
// --model, --adapter, --db, --backend, --gpu.
GeneratorOptions generator_options(const ParsedArgs& p);
// --max-new-tokens, --temperature, --top-k, --top-p, --repetition-penalty, --seed, --stop, --ignore-eos.
SamplingParams sampling_params(const ParsedArgs& p);
// --thinking on|off (unset: the template's default).
std::optional<bool> thinking_flag(const ParsedArgs& p);
extern const char* const kSamplingUsage;

}  // namespace deltatune::cli
