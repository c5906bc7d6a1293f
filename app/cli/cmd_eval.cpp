#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/evaluate.h"

namespace deltatune::cli {

int cmd_eval(const Args& args) {
  const ParsedArgs p = parse_args(args, {"--model", "--data", "--seq-len", "--adapter", "--backend"}, {});
  check(p.has("--model") && p.has("--data"),
        "usage: deltatune eval --model DIR --data FILE.jsonl [--seq-len N] [--adapter DIR] [--backend cpu|cuda|auto]");
  EvalOptions o;
  o.model_dir = p.get("--model");
  o.data_path = p.get("--data");
  o.adapter_dir = p.get("--adapter");
  o.backend = backend_option(p);
  if (p.has("--seq-len")) o.seq_len = int_option("--seq-len", p.get("--seq-len"), 1);
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult r = evaluate(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json j = {{"loss", r.loss}, {"tokens", r.tokens}, {"sequences", r.sequences},
                      {"input_tokens", r.input_tokens}, {"seconds", secs}};
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace deltatune::cli
