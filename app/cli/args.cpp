#include "args.h"

#include <exception>

#include "deltatune/error.h"

namespace deltatune::cli {

ParsedArgs parse_args(const std::vector<std::string>& args, const std::set<std::string>& value_options,
                      const std::set<std::string>& flag_options) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0) {
      std::string key = a, value;
      const auto eq = a.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        key = a.substr(0, eq);
        value = a.substr(eq + 1);
      }
      if (value_options.count(key)) {
        if (!inline_value) {
          check(i + 1 < args.size(), "option " + key + " needs a value");
          value = args[++i];
        }
        out.options[key] = value;
      } else if (flag_options.count(key) && !inline_value) {
        out.flags.insert(key);
      } else {
        std::string valid;
        for (const auto& v : value_options) valid += " " + v;
        for (const auto& f : flag_options) valid += " " + f;
        throw Error("unknown option " + a + " (valid:" + valid + ")");
      }
    } else {
      out.positionals.push_back(a);
    }
  }
  return out;
}

int64_t int_option(const std::string& key, const std::string& value, int64_t min) {
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n >= min) return n;
  } catch (const std::exception&) {
  }
  throw Error("option " + key + " expects an integer >= " + std::to_string(min) + ", got '" + value + "'");
}

int64_t max_steps_option(const std::string& value) {
  if (value == "-1") return -1;
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  throw Error("option --max-steps expects an integer >= 1, or -1 for no limit, got '" + value + "'");
}

std::string backend_option(const ParsedArgs& p, const std::string& fallback) {
  const std::string b = p.get("--backend", fallback);
  check(b == "auto" || b == "cpu" || b == "cuda", "option --backend expects auto, cpu or cuda, got '" + b + "'");
  return b;
}

}  // namespace deltatune::cli
