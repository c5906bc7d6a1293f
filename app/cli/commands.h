// One function per `deltatune` sub-command, each in its own cmd_*.cpp. They return the exit code.
#pragma once
#include <string>
#include <vector>

namespace deltatune::cli {

using Args = std::vector<std::string>;  // arguments after the sub-command name

int cmd_info(const Args& args);       // deltatune info --model DIR
int cmd_eval(const Args& args);       // deltatune eval --model DIR --data FILE [--seq-len N] [--adapter DIR]
int cmd_train(const Args& args);      // deltatune train RUN.yaml [--resume RUN]
int cmd_tokenize(const Args& args);   // deltatune tokenize --model DIR [--chat]
int cmd_prepare(const Args& args);    // deltatune prepare RUN.yaml [--out FILE]
int cmd_runs(const Args& args);       // deltatune runs list|show|compare|delete|tag
int cmd_export(const Args& args);     // deltatune export (RUN [--checkpoint N] | --adapter DIR) --out DIR [--merged]
int cmd_demo(const Args& args);
int cmd_chat(const Args& args);       // deltatune chat --model DIR [--adapter DIR|RUN]: interactive, streamed
int cmd_generate(const Args& args);   // deltatune generate --model DIR [--adapter DIR|RUN] --prompts FILE.jsonl       // deltatune demo: headless training run on the bundled tiny model

}  // namespace deltatune::cli
