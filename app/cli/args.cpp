#include "args.h"

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

}  // namespace deltatune::cli
