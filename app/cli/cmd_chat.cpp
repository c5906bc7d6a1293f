// deltatune chat --model DIR [--adapter DIR|RUN] [--system TEXT] [sampling]: an interactive conversation on the
// terminal, the answer streamed as it is generated. Lines starting with '/' are commands: /base and /adapter
// switch who answers (same weights), /reset starts over, /exit (or end of input) quits.
#include <iostream>

#include "commands.h"
#include "generation_flags.h"

namespace deltatune::cli {

namespace {

const char* const kUsage = "usage: deltatune chat --model DIR [--adapter DIR|RUN] [--system TEXT] [sampling options]\n";

int run(const Args& args) {
  auto values = generation_value_options();
  values.insert("--system");
  const ParsedArgs p = parse_args(args, values, generation_flag_options());
  const SamplingParams sampling = sampling_params(p);
  const std::optional<bool> thinking = thinking_flag(p);
  Generator gen(generator_options(p));
  if (!gen.has_tokenizer()) throw UsageError(p.get("--model") + ": no tokenizer.json, so there is no chat");
  bool use_adapter = gen.has_adapter();
  std::cerr << "deltatune chat on " << gen.backend_name()
            << (gen.has_adapter() ? " with adapter " + gen.adapter_dir() : std::string(" (base model)"))
            << ". Commands: /base /adapter /reset /exit\n";
  if (!gen.backend_note().empty()) std::cerr << gen.backend_note() << "\n";
  std::vector<ChatMessage> history;
  if (p.has("--system")) history.push_back({"system", p.get("--system")});
  const size_t keep = history.size();
  std::string line;
  while (true) {
    std::cerr << (use_adapter ? "[adapter] > " : "[base] > ") << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history.resize(keep);
      continue;
    }
    if (line == "/base" || line == "/adapter") {
      if (line == "/adapter" && !gen.has_adapter()) {
        std::cerr << "no adapter loaded (start with --adapter DIR|RUN)\n";
        continue;
      }
      use_adapter = line == "/adapter";
      continue;
    }
    history.push_back({"user", line});
    GenerateRequest r;
    r.messages = history;
    r.sampling = sampling;
    r.enable_thinking = thinking;
    r.use_adapter = use_adapter;
    const auto res = gen.generate({r}, [](const GenerateEvent& e) { std::cout << e.text_delta << std::flush; });
    std::cout << "\n";
    if (res[0].finish_reason == "length") std::cerr << "[stopped at " << sampling.max_new_tokens << " new tokens]\n";
    history.push_back({"assistant", res[0].text});
  }
  return 0;
}

}  // namespace

int cmd_chat(const Args& args) {
  try {
    return run(args);
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n" << kUsage << kSamplingUsage;
    return 2;
  }
}

}  // namespace deltatune::cli
