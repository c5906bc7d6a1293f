// A Jinja2 subset interpreter for chat templates, rendering as HF `apply_chat_template` does
// (ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, loopcontrols, HF's tojson,
// raise_exception, namespace, strftime_now). Unsupported constructs raise deltatune::Error naming the
// construct and the template line.
#pragma once
#include <memory>
#include <string>

#include "data/jinja/value.h"

namespace deltatune::jinja {

struct Node;

class Template {
 public:
  // Parses `source`; `name` is used in error messages ("chat template line 12: ...").
  explicit Template(const std::string& source, std::string name = "chat template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the top-level variables of `context` (a dict Value).
  std::string render(const Value& context) const;

 private:
  std::string name_;
  std::unique_ptr<Node> root_;
};

}  // namespace deltatune::jinja
