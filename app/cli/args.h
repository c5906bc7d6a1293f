// Tiny option parser for the sub-commands: --key value, --flag, positionals.
#pragma once
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

}  // namespace deltatune::cli
