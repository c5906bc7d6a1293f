// `deltatune`: the headless CLI over the engine.
#include <cstring>
#include <exception>
#include <iostream>
#include <map>

#include "commands.h"
#include "deltatune/error.h"

namespace {

using deltatune::cli::Args;

void print_usage() {
  std::cout << "deltatune " DT_VERSION " - LoRA fine-tuning for Qwen3.5\n"
               "usage: deltatune <command> [options]\n"
               "  info     [--model DIR]                    the GPU runtime; with --model, a checkpoint folder\n"
               "  eval     --model DIR --data FILE.jsonl    loss of pre-tokenized data [--seq-len N] [--adapter DIR]\n"
               "  train    RUN.yaml [--resume RUN] [--gpus 0,1|all]   LoRA training run (one worker per GPU)\n"
               "  tokenize --model DIR [--chat]             JSONL on stdin -> ids (and labels with --chat)\n"
               "  prepare  RUN.yaml [--out FILE]            tokenize and pack a run's datasets, print statistics\n"
               "  runs     list|show|compare|delete|tag     the experiment database\n"
               "  export   RUN|--adapter DIR --out DIR      PEFT adapter or --merged checkpoint\n"
               "  chat     --model DIR [--adapter DIR|RUN]  talk to the model (streamed; /base /adapter /reset)\n"
               "  generate --model DIR --prompts FILE.jsonl one JSON answer per prompt [--adapter DIR|RUN]\n"
               "  demo                                      train the bundled tiny model headless\n"
               "  --version\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "deltatune " DT_VERSION "\n";
    return 0;
  }
  using Fn = int (*)(const Args&);
  const std::map<std::string, Fn> commands = {
      {"info", deltatune::cli::cmd_info},         {"eval", deltatune::cli::cmd_eval},
      {"train", deltatune::cli::cmd_train},       {"tokenize", deltatune::cli::cmd_tokenize},
      {"prepare", deltatune::cli::cmd_prepare},   {"runs", deltatune::cli::cmd_runs},
      {"export", deltatune::cli::cmd_export},     {"demo", deltatune::cli::cmd_demo},
      {"chat", deltatune::cli::cmd_chat},         {"generate", deltatune::cli::cmd_generate}};
  const auto it = commands.find(argv[1]);
  if (it == commands.end()) {
    std::cerr << "error: unknown command '" << argv[1] << "'\n";
    print_usage();
    return 2;
  }
  try {
    return it->second(Args(argv + 2, argv + argc));
  } catch (const deltatune::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
}
