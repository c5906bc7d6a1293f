// Tiny option parser for the sub-commands: --key value, --flag, positionals.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace deltatune::cli {

struct ParsedArgs {
  std::map<std::string, std::string> options;  // "--model" -> "DIR"
  std::set<std::string> flags;                 // "--chat"
  std::vector<std::string> positionals;
  bool has(const std::string& key) const { return options.count(key) || flags.count(key); }
  std::string get(const std::string& key, const std::string& fallback = "") const {
    auto it = options.find(key);
    return it == options.end() ? fallback : it->second;
  }
};

// `value_options` take a value; `flag_options` do not. Anything else starting with "--" throws Error.
ParsedArgs parse_args(const std::vector<std::string>& args, const std::set<std::string>& value_options,
                      const std::set<std::string>& flag_options);

// `value`, the value of option `key`, as an integer >= min; otherwise throws Error naming the option, the value and
// what was expected ("option --max-steps expects an integer >= 1, got 'x'").
int64_t int_option(const std::string& key, const std::string& value, int64_t min);

// --max-steps' value: an integer >= 1, or -1 for no limit (as max_steps in a run file); otherwise throws Error.
int64_t max_steps_option(const std::string& value);

// The value of --backend (`fallback` when absent); throws Error unless it is auto, cpu or cuda.
std::string backend_option(const ParsedArgs& p, const std::string& fallback = "auto");

}  // namespace deltatune::cli
