// generation_end_ids (decode_loop.h): the end tokens of a checkpoint, as HF generate and the chat template know them.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "decode/decode_loop.h"

namespace deltatune {

namespace {

void add_ids(const nlohmann::json& v, std::set<int32_t>& out) {
  if (v.is_number_integer()) out.insert(v.get<int32_t>());
  if (v.is_array())
    for (const auto& x : v)
      if (x.is_number_integer()) out.insert(x.get<int32_t>());
}

}  // namespace

std::set<int32_t> generation_end_ids(const std::string& model_dir, int64_t config_eos, const Tokenizer* tok,
                                     const ChatTemplate* tpl) {
  std::set<int32_t> ids;
  const std::filesystem::path p = std::filesystem::path(model_dir) / "generation_config.json";
  nlohmann::json gen_cfg;
  if (std::ifstream in(p); in.good()) {
    gen_cfg = nlohmann::json::parse(in, nullptr, false);
    check(!gen_cfg.is_discarded(), p.string() + ": not valid JSON");
  }
  if (gen_cfg.is_object() && gen_cfg.contains("eos_token_id")) add_ids(gen_cfg["eos_token_id"], ids);
  else if (config_eos >= 0) ids.insert(static_cast<int32_t>(config_eos));
  if (tok && tpl && !tpl->eos_token().empty()) {
    const int32_t id = tok->token_to_id(tpl->eos_token());
    if (id >= 0) ids.insert(id);
  }
  return ids;
}

}  // namespace deltatune
