// PEFT adapter folders: adapter_config.json + adapter_model.safetensors (docs/peft-adapter.md §1-§6).
#include "lora/peft_io.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "io/safetensors.h"

namespace deltatune {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";
constexpr const char* kKeyRoot = "base_model.model.";
const char* const kPrefixes[] = {"model.language_model.", "model."};  // longest first
// The vision tower's modules in Qwen3_5ForConditionalGeneration: model.visual.blocks.N.* (LoraModule paths keep
// "visual.").
constexpr const char* kVisionPrefix = "model.";
constexpr const char* kVisionKey = "model.visual.blocks.";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string regex_escape(const std::string& s) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char c : s) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

std::regex make_regex(const std::string& pattern, const std::string& where) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw Error(where + ": pattern '" + pattern + "' is not a regular expression this reader understands (" +
                e.what() + ")");
  }
}

// Full module names a PEFT config may have been matched against (either class).
std::vector<std::string> full_names(const std::string& path) {
  return {"model.language_model." + path, "model." + path};
}

// `target_modules` / `exclude_modules`: a list (exact name or dot-bounded suffix) or one regex string
// (re.fullmatch over the full name); "all-linear" selects every linear module.
bool config_target_matches(const json& targets, const LoraModule& m, const std::string& where) {
  if (targets.is_null()) return false;
  if (targets.is_string()) {
    const std::string pattern = targets.get<std::string>();
    if (pattern == "all-linear") return m.experts == 0;
    const std::regex re = make_regex(pattern, where);
    for (const std::string& n : full_names(m.path))
      if (std::regex_match(n, re)) return true;
    return false;
  }
  check(targets.is_array(), where + ": expected a list of names or one regex string");
  for (const json& t : targets) {
    check(t.is_string(), where + ": every entry must be a string");
    if (lora_target_matches(m, t.get<std::string>())) return true;
  }
  return false;
}

// rank_pattern / alpha_pattern: PEFT's get_pattern_key = first key k with re.match(r"(.*\.)?(k)$", name).
const json* pattern_value(const json& patterns, const std::vector<std::string>& names, const std::string& where) {
  if (!patterns.is_object()) return nullptr;
  for (auto it = patterns.begin(); it != patterns.end(); ++it) {
    const std::regex re = make_regex("(.*\\.)?(" + it.key() + ")$", where);
    for (const std::string& n : names)
      if (std::regex_match(n, re)) return &it.value();
  }
  return nullptr;
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    check(f.good(), path.string() + ": cannot open for writing");
    f << text;
    f.flush();
    check(f.good(), path.string() + ": write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(path.string() + ": cannot move the written file into place: " + ec.message());
  }
}

json read_json_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path.string() + ": cannot open (is this a PEFT adapter folder?)");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// Expert modules of one layer as PEFT nests them: the parameter registered first (gate_up_proj) is the inner
// wrapper ("experts.base_layer") when both are targeted; a single targeted parameter sits at "experts".
std::string expert_key_module(const LoraModule& m, bool both_in_layer) {
  const std::string experts = m.path.substr(0, m.path.rfind('.'));  // layers.N.mlp.experts
  if (both_in_layer && ends_with(m.path, ".gate_up_proj")) return experts + ".base_layer";
  return experts;
}

// PEFT < 0.19.1 stored 3-D expert LoRA transposed (peft-adapter.md §6.3): A_old (r·E, out), B_old (in, r·E) with
// delta[e] = s·(B_e A_e)^T. Returns the ≥ 0.19.1 factors: B[:, k*E+e] = A_old[e*r+k, :],
// A[e*r+k, :] = B_old[:, k*E+e].
void convert_old_expert_orientation(const LoraModule& m, int r, const Tensor& a_old, const Tensor& b_old, Tensor& a,
                                    Tensor& b) {
  const int64_t E = m.experts;
  a = host_tensor({r * E, m.in});
  b = host_tensor({m.out, r * E});
  const float* ao = a_old.ptr<float>();  // [r*E, out]
  const float* bo = b_old.ptr<float>();  // [in, r*E]
  float* an = a.ptr<float>();
  float* bn = b.ptr<float>();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t o = 0; o < m.out; ++o) bn[o * r * E + k * E + e] = ao[(e * r + k) * m.out + o];
      for (int64_t i = 0; i < m.in; ++i) an[(e * r + k) * m.in + i] = bo[i * r * E + k * E + e];
    }
}

bool version_before_0_19_1(const json& cfg) {
  if (!cfg.contains("peft_version") || !cfg["peft_version"].is_string()) return true;  // older than 0.18
  int v[3] = {0, 0, 0};
  std::sscanf(cfg["peft_version"].get<std::string>().c_str(), "%d.%d.%d", &v[0], &v[1], &v[2]);
  return std::make_tuple(v[0], v[1], v[2]) < std::make_tuple(0, 19, 1);
}

}  // namespace

std::string peft_class_prefix(const std::string& base_key_prefix, const std::string& model_class) {
  if (model_class == "auto" || model_class.empty()) {
    // Base-model checkpoints load into the matching causal-LM class: Qwen3_5Model's language_model.* into
    // ForConditionalGeneration, Qwen3_5TextModel's unprefixed keys into ForCausalLM.
    if (base_key_prefix == "language_model.") return "model.language_model.";
    if (base_key_prefix.empty()) return "model.";
    check(base_key_prefix == "model." || base_key_prefix == "model.language_model.",
          "internal: checkpoint key prefix '" + base_key_prefix + "' is neither model. nor model.language_model.");
    return base_key_prefix;
  }
  if (model_class == "causal_lm") return "model.";
  if (model_class == "conditional_generation") return "model.language_model.";
  throw Error("model_class: '" + model_class + "' is not one of auto, causal_lm, conditional_generation");
}

// ------------------------------------------------------------------------------------------------ write

void peft_adapter_write(const LoraAdapter& adapter, const ModelConfig& cfg, const std::string& class_prefix,
                        const std::string& base_model_name, const std::string& dir) {
  check(class_prefix == "model." || class_prefix == "model.language_model.",
        "adapter export: class prefix must be model. or model.language_model., got '" + class_prefix + "'");
  check(!adapter.modules.empty(), "adapter export: the adapter has no modules");
  const std::vector<LoraModule> inv = lora_inventory(cfg);
  std::set<std::string> adapted;
  bool vision = false;
  for (const LoraModule& m : adapter.modules) {
    bool known = false;
    for (const LoraModule& i : inv) known |= i.path == m.path;
    check(known, "adapter export: module " + m.path + " does not exist in this " + cfg.model_type + " model");
    adapted.insert(m.path);
    vision |= m.group == "vision";
  }
  // The vision tower's modules exist in the vision-language class only (model.visual.*, beside the text model's
  // model.language_model.*).
  check(!vision || class_prefix == "model.language_model.",
        "adapter export: the adapter has vision tower modules, which only the vision-language class "
        "(*ForConditionalGeneration, model_class conditional_generation or auto) has");
  auto key_prefix = [&](const LoraModule& m) { return m.group == "vision" ? std::string(kVisionPrefix) : class_prefix; };

  // target_modules: the distinct last components when they select exactly the adapted linears; otherwise
  // (a subset of layers, say) one regex that names each adapted module, so PEFT adapts nothing else.
  std::set<std::string> suffixes;
  std::vector<std::string> linear_paths;
  std::set<std::string> param_suffixes;
  std::vector<std::string> param_paths;
  for (const LoraModule& m : adapter.modules) {
    if (m.experts > 0) {
      param_suffixes.insert("mlp." + m.suffix);
      param_paths.push_back(m.path);
    } else {
      suffixes.insert(m.path.substr(m.path.rfind('.') + 1));
      linear_paths.push_back(m.path);
    }
  }
  auto selects_exactly = [&](const std::set<std::string>& targets, bool experts) {
    for (const LoraModule& i : inv) {
      if ((i.experts > 0) != experts) continue;
      bool hit = false;
      for (const std::string& t : targets) hit |= lora_target_matches(i, t);
      if (hit != (adapted.count(i.path) > 0)) return false;
    }
    return true;
  };
  json target_modules = nullptr;
  if (!linear_paths.empty()) {
    // A list target names a leaf anywhere in the model: the tower's `proj` would also take its patch_embed.proj,
    // so an adapter with tower modules names each module by regex.
    if (!vision && selects_exactly(suffixes, false)) {
      target_modules = json::array();
      for (const std::string& s : suffixes) target_modules.push_back(s);
    } else {
      std::string alt, alt_vision;
      for (const LoraModule& m : adapter.modules) {
        if (m.experts > 0) continue;
        std::string& a = m.group == "vision" ? alt_vision : alt;
        a += (a.empty() ? "" : "|") + regex_escape(m.group == "vision" ? m.path.substr(std::string("visual.").size())
                                                                       : m.path);
      }
      std::string re;
      if (!alt.empty()) re = regex_escape(class_prefix) + "(?:" + alt + ")";
      if (!alt_vision.empty())
        re += (re.empty() ? "" : "|") + regex_escape(std::string(kVisionPrefix) + "visual.") + "(?:" + alt_vision + ")";
      target_modules = re;
    }
  }
  json target_parameters = nullptr;
  if (!param_paths.empty()) {
    target_parameters = json::array();
    if (selects_exactly(param_suffixes, true)) {
      for (const std::string& s : param_suffixes) target_parameters.push_back(s);
    } else {
      for (const std::string& p : param_paths) target_parameters.push_back(class_prefix + p);
    }
  }

  // Per-module rank/alpha that differ from the adapter-wide values go to rank_pattern / alpha_pattern,
  // keyed by the escaped module path (PEFT matches (.*\.)?(key)$).
  json rank_pattern = json::object(), alpha_pattern = json::object();
  auto number = [](double v) -> json {
    if (std::abs(v - std::round(v)) < 1e-9 * std::max(1.0, std::abs(v))) return static_cast<int64_t>(std::llround(v));
    return v;
  };
  for (const LoraModule& m : adapter.modules) {
    const std::string key = regex_escape(m.path);
    if (m.r != adapter.r) rank_pattern[key] = m.r;
    const double denom = adapter.rslora ? std::sqrt(double(m.r)) : double(m.r);
    if (static_cast<float>(adapter.alpha / denom) != m.scaling) {
      double alpha = double(m.scaling) * denom;
      if (std::abs(alpha - std::round(alpha)) < 1e-5 * std::max(1.0, alpha)) alpha = std::round(alpha);
      alpha_pattern[key] = number(alpha);
    }
  }

  // Every field PEFT 0.21 writes (sorted keys, indent 2, as PeftConfigMixin.save_pretrained does).
  json c = json::object();
  c["alora_invocation_tokens"] = nullptr;
  c["alpha_pattern"] = alpha_pattern;
  c["arrow_config"] = nullptr;
  c["auto_mapping"] = nullptr;
  c["base_model_name_or_path"] = base_model_name.empty() ? json(nullptr) : json(base_model_name);
  c["bias"] = "none";
  c["corda_config"] = nullptr;
  c["ensure_weight_tying"] = false;
  c["eva_config"] = nullptr;
  c["exclude_modules"] = nullptr;
  c["fan_in_fan_out"] = false;
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;  // any other value runs an init at load that may touch base weights (peft-adapter.md §9, pitfall 8)
  c["kasa_config"] = nullptr;
  c["layer_replication"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["layers_to_transform"] = nullptr;
  c["loftq_config"] = json::object();
  c["lora_alpha"] = number(adapter.alpha);
  c["lora_bias"] = false;
  // ParamWrapper (expert LoRA) refuses any dropout; dropout is inactive at inference anyway.
  c["lora_dropout"] = target_parameters.is_null() ? adapter.dropout : 0.0;
  c["lora_ga_config"] = nullptr;
  c["megatron_config"] = nullptr;
  c["megatron_core"] = "megatron.core";
  c["modules_to_save"] = nullptr;
  c["monteclora_config"] = nullptr;
  c["peft_type"] = "LORA";
  c["peft_version"] = "0.21.2";
  c["qalora_group_size"] = 16;
  c["r"] = adapter.r;
  c["rank_pattern"] = rank_pattern;
  c["revision"] = nullptr;
  c["target_modules"] = target_modules;
  c["target_parameters"] = target_parameters;
  c["task_type"] = "CAUSAL_LM";
  c["trainable_token_indices"] = nullptr;
  c["use_bdlora"] = nullptr;
  c["use_dora"] = false;
  c["use_qalora"] = false;
  c["use_rslora"] = adapter.rslora;
  c["velora_config"] = nullptr;

  // Tensors: F32, no adapter name in the key (peft-adapter.md §4.1), experts nested as PEFT does (§6.1).
  std::map<int, int> experts_per_layer;
  for (const LoraModule& m : adapter.modules)
    if (m.experts > 0) experts_per_layer[m.layer]++;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const LoraModule& m : adapter.modules) {
    const int64_t rows = m.experts > 0 ? int64_t(m.r) * m.experts : m.r;
    for (const Tensor* t : {&m.A, &m.B})
      check(t->device == Device::CPU, "internal: adapter export needs host tensors (download " + m.path + " first)");
    check(m.A.shape == Shape({rows, m.in}) && m.B.shape == Shape({m.out, rows}),
          "adapter export: " + m.path + " has A " + shape_str(m.A.shape) + ", B " + shape_str(m.B.shape) +
              ", expected " + shape_str({rows, m.in}) + " and " + shape_str({m.out, rows}));
    const std::string module =
        m.experts > 0 ? expert_key_module(m, experts_per_layer[m.layer] == 2) : m.path;
    const std::string base = kKeyRoot + key_prefix(m) + module;
    tensors.emplace_back(base + ".lora_A.weight", m.A.dtype == DType::F32 ? m.A : host_convert(m.A, DType::F32));
    tensors.emplace_back(base + ".lora_B.weight", m.B.dtype == DType::F32 ? m.B : host_convert(m.B, DType::F32));
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec && fs::is_directory(dir), dir + ": cannot create the adapter folder: " + ec.message());
  const fs::path d(dir);
  // Each file is atomic (temp + rename); the weights go last, so where adapter_model.safetensors is (the
  // mark of an adapter folder, e.g. a run's output folder written in place) its config is too.
  write_text_atomic(d / kConfigName, c.dump(2) + "\n");
  const std::string cls = class_prefix == "model." ? "*ForCausalLM (AutoModelForCausalLM)"
                                                   : "*ForConditionalGeneration";
  std::ostringstream readme;
  readme << "---\nlibrary_name: peft\n";
  if (!base_model_name.empty()) readme << "base_model: " << base_model_name << "\n";
  readme << "---\n\n# LoRA adapter (DeltaTune)\n\n"
         << "Keys use the module layout of **" << cls << "** (prefix `" << class_prefix << "`). Load it into\n"
         << "that class: an adapter for the other class loads only partly (PEFT warns about missing keys).\n\n"
         << "```python\nfrom peft import PeftModel\nmodel = PeftModel.from_pretrained(base_model, \"<this folder>\")\n```\n\n"
         << "r = " << adapter.r << ", lora_alpha = " << c["lora_alpha"].dump() << ", use_rslora = "
         << (adapter.rslora ? "true" : "false") << ", trainable parameters = " << adapter.trainable_params()
         << ".\nRequires peft >= 0.19.1 when expert parameters are adapted (3-D expert LoRA layout).\n";
  write_text_atomic(d / "README.md", readme.str());
  safetensors_write((d / kWeightsName).string(), tensors);
}

// ------------------------------------------------------------------------------------------------ read

LoraAdapter peft_adapter_read(const std::string& dir, const ModelConfig& cfg) {
  const fs::path d(dir);
  check(fs::is_directory(d), dir + ": adapter folder does not exist");
  const fs::path cfg_path = d / kConfigName;
  const std::string cfg_name = cfg_path.string();
  const json c = read_json_file(cfg_path);
  check(c.is_object(), cfg_name + ": expected a JSON object");
  check(c.contains("peft_type"), cfg_name + ": missing peft_type (not a PEFT adapter config)");
  check(c["peft_type"] == "LORA", cfg_name + ": peft_type is " + c["peft_type"].dump() + ", only LORA is supported");
  if (c.contains("task_type") && !c["task_type"].is_null())
    check(c["task_type"] == "CAUSAL_LM", cfg_name + ": task_type " + c["task_type"].dump() +
                                             " is not for a causal LM (expected CAUSAL_LM or null)");
  auto flag = [&](const char* key) { return c.contains(key) && c[key].is_boolean() && c[key].get<bool>(); };
  for (const char* k : {"use_dora", "lora_bias", "fan_in_fan_out"})
    check(!flag(k), cfg_name + ": " + k + " = true is not supported");
  if (c.contains("bias") && c["bias"].is_string())
    check(c["bias"] == "none", cfg_name + ": bias " + c["bias"].dump() + " is not supported (expected \"none\")");
  if (c.contains("modules_to_save"))
    check(c["modules_to_save"].is_null() || c["modules_to_save"].empty(),
          cfg_name + ": modules_to_save (full module copies) is not supported");
  check(c.contains("r") && c["r"].is_number_integer() && c["r"].get<int64_t>() > 0,
        cfg_name + ": r must be a positive integer");
  const int r = c["r"].get<int>();
  const double alpha = c.contains("lora_alpha") && c["lora_alpha"].is_number() ? c["lora_alpha"].get<double>() : 8.0;
  const bool rslora = flag("use_rslora");
  const json target_modules = c.value("target_modules", json(nullptr));
  const json target_parameters = c.value("target_parameters", json(nullptr));
  const json exclude = c.value("exclude_modules", json(nullptr));
  check(!target_parameters.is_string(), cfg_name + ": target_parameters must be a list");
  std::set<int64_t> layers_to_transform;
  if (c.contains("layers_to_transform") && !c["layers_to_transform"].is_null()) {
    const json& l = c["layers_to_transform"];
    if (l.is_number_integer()) layers_to_transform.insert(l.get<int64_t>());
    else if (l.is_array())
      for (const json& v : l) layers_to_transform.insert(v.get<int64_t>());
    else throw Error(cfg_name + ": layers_to_transform must be an integer or a list of integers");
  }

  // Which modules the config adapts in this model.
  const std::vector<LoraModule> inv = lora_inventory(cfg);
  std::vector<bool> targeted(inv.size(), false);
  std::set<std::string> used_targets;
  for (size_t i = 0; i < inv.size(); ++i) {
    const LoraModule& m = inv[i];
    // layers_to_transform and exclude_modules filter target_modules only: PEFT's _inject_parameters matches
    // target_parameters against every module's parameters, in every layer.
    if (m.experts == 0) {
      if (!layers_to_transform.empty() && !layers_to_transform.count(m.layer)) continue;
      if (config_target_matches(exclude, m, cfg_name + " exclude_modules")) continue;
      targeted[i] = config_target_matches(target_modules, m, cfg_name + " target_modules");
    } else if (target_parameters.is_array())
      for (const json& t : target_parameters)
        if (t.is_string() && lora_target_matches(m, t.get<std::string>())) targeted[i] = true;
  }
  // Targets that name nothing of this model: a different model, or modules we cannot adapt (vision, lm_head).
  // A list entry whose last component is an adaptable projection of some Qwen3.5 model (in_proj_z of a model
  // without linear-attention layers, gate_proj of an MoE model without a shared expert, a layer index past
  // the end) matches nothing in PEFT either, which accepts the adapter as long as one target matches.
  std::vector<std::string> unknown;
  auto any_match = [&](const std::string& t, bool experts) {
    for (const LoraModule& m : inv)
      if ((m.experts > 0) == experts && lora_target_matches(m, t)) return true;
    return false;
  };
  auto adaptable_leaf = [](const std::string& t, bool experts) {
    static const std::set<std::string> linears = {"q_proj",    "k_proj",      "v_proj",    "o_proj",
                                                  "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b",
                                                  "out_proj",  "gate_proj",   "up_proj",   "down_proj",
                                                  "qkv",       "proj",        "linear_fc1", "linear_fc2"};
    static const std::set<std::string> params = {"gate_up_proj", "down_proj"};
    const std::string leaf = t.substr(t.rfind('.') + 1);
    return experts ? params.count(leaf) > 0 : linears.count(leaf) > 0;
  };
  if (target_modules.is_array()) {
    for (const json& t : target_modules)
      if (t.is_string() && !any_match(t.get<std::string>(), false) && !adaptable_leaf(t.get<std::string>(), false))
        unknown.push_back(t.get<std::string>());
  }
  // A regex string that matches nothing here is fine while target_parameters match (PEFT only warns); one that
  // matched modules we cannot adapt shows up as their tensors below.
  if (target_parameters.is_array())
    for (const json& t : target_parameters)
      if (t.is_string() && !any_match(t.get<std::string>(), true) && !adaptable_leaf(t.get<std::string>(), true))
        unknown.push_back(t.get<std::string>());
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& u : unknown) list += (list.empty() ? "" : ", ") + u;
    throw Error(cfg_name + ": target(s) " + list + " match no adaptable module of this " + cfg.model_type +
                " model (supported: attention, linear-attention, MLP/shared-expert projections, expert tensors)");
  }
  check(std::count(targeted.begin(), targeted.end(), true) > 0,
        cfg_name + ": target_modules " + target_modules.dump() + " / target_parameters " + target_parameters.dump() +
            " select no adaptable module of this " + cfg.model_type +
            " model (supported: attention, linear-attention, MLP/shared-expert projections, expert tensors)");

  // Expert nesting per layer (peft-adapter.md §6.1).
  std::map<int, std::vector<size_t>> experts_of_layer;
  for (size_t i = 0; i < inv.size(); ++i)
    if (targeted[i] && inv[i].experts > 0) experts_of_layer[inv[i].layer].push_back(i);
  std::map<std::string, size_t> module_of_key_module;  // "layers.0.mlp.experts.base_layer" -> inventory index
  for (size_t i = 0; i < inv.size(); ++i) {
    if (!targeted[i]) continue;
    if (inv[i].experts == 0) module_of_key_module[inv[i].path] = i;
    else module_of_key_module[expert_key_module(inv[i], experts_of_layer[inv[i].layer].size() == 2)] = i;
  }

  // Tensors.
  const fs::path w_path = d / kWeightsName;
  check(fs::exists(w_path), w_path.string() + ": missing (PEFT adapters store their weights in this one file)");
  SafetensorsFile file(w_path.string());
  const std::string wname = w_path.string();
  std::map<size_t, Tensor> a_of, b_of;
  std::map<std::string, int> zero_size_modules;  // module -> how many of its tensors have a zero dimension
  std::string prefix_seen;
  for (const TensorEntry& e : file.entries()) {
    const std::string& key = e.name;
    check(starts_with(key, kKeyRoot), wname + ": tensor " + key + " does not start with base_model.model.");
    std::string rest = key.substr(std::string(kKeyRoot).size());
    const bool vision_key = starts_with(rest, kVisionKey);
    std::string prefix;
    for (const char* p : kPrefixes)
      if (starts_with(rest, p)) {
        prefix = p;
        break;
      }
    if (vision_key) {
      prefix = kVisionPrefix;
    } else {
      check(!prefix.empty() && starts_with(rest.substr(prefix.size()), "layers."),
            wname + ": tensor " + key + " is not for a module of the text decoder or the vision tower's blocks");
      check(prefix_seen.empty() || prefix_seen == prefix,
            wname + ": tensors mix the prefixes " + prefix_seen + " and " + prefix);
      prefix_seen = prefix;
    }
    rest = rest.substr(prefix.size());
    bool is_a = false;
    std::string module;
    for (const char* leaf : {".lora_A.weight", ".lora_A.default.weight", ".lora_B.weight", ".lora_B.default.weight"})
      if (ends_with(rest, leaf)) {
        module = rest.substr(0, rest.size() - std::string(leaf).size());
        is_a = std::string(leaf).find("lora_A") != std::string::npos;
        break;
      }
    check(!module.empty(), wname + ": tensor " + key +
                               " is not a lora_A/lora_B weight (DoRA, biases, embeddings and full module copies "
                               "are not supported)");
    auto it = module_of_key_module.find(module);
    // shared_expert_intermediate_size 0: transformers builds zero-sized shared-expert linears and PEFT adapts
    // them; their LoRA (one factor has a zero dimension) changes nothing, so it is skipped.
    if (it == module_of_key_module.end() && cfg.is_moe() && !cfg.has_shared_expert() &&
        module.find(".mlp.shared_expert.") != std::string::npos) {
      zero_size_modules[module] += e.shape.size() == 2 && (e.shape[0] == 0 || e.shape[1] == 0) ? 1 : 0;
      continue;
    }
    if (it == module_of_key_module.end()) {
      bool exists = false;
      for (const LoraModule& m : inv) exists |= m.path == module;
      throw Error(wname + ": tensor " + key + (exists || ends_with(module, ".mlp.experts") ||
                                                        ends_with(module, ".mlp.experts.base_layer")
                                                    ? " is for a module that " + cfg_name + " does not target"
                                                    : " names module " + module + ", which is not an adaptable "
                                                          "module of this " + cfg.model_type + " model (supported: "
                                                          "attention, linear-attention, MLP/shared-expert "
                                                          "projections, expert tensors)"));
    }
    Tensor t = file.get(key);
    check(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16,
          wname + ": tensor " + key + " has dtype " + dtype_name(t.dtype) + ", expected F32, BF16 or F16");
    check(t.ndim() == 2, wname + ": tensor " + key + " has shape " + shape_str(t.shape) + ", expected 2-D");
    (is_a ? a_of : b_of)[it->second] = host_convert(t, DType::F32);
  }

  for (const auto& [module, zero_dims] : zero_size_modules)
    check(zero_dims > 0, wname + ": tensors for " + module + ", a shared expert this " + cfg.model_type +
                             " model does not have (shared_expert_intermediate_size is 0)");

  LoraAdapter adapter;
  adapter.r = r;
  adapter.alpha = alpha;
  adapter.dropout = c.contains("lora_dropout") && c["lora_dropout"].is_number() ? c["lora_dropout"].get<double>() : 0;
  adapter.rslora = rslora;
  adapter.class_prefix = prefix_seen;
  bool vision_targeted = false;
  for (size_t i = 0; i < inv.size(); ++i) vision_targeted |= targeted[i] && inv[i].group == "vision";
  if (vision_targeted && adapter.class_prefix.empty()) adapter.class_prefix = "model.language_model.";
  const json rank_pattern = c.value("rank_pattern", json::object());
  const json alpha_pattern = c.value("alpha_pattern", json::object());
  const bool old_orientation_possible = version_before_0_19_1(c);
  std::vector<std::string> missing;
  for (size_t i = 0; i < inv.size(); ++i) {
    if (!targeted[i]) continue;
    LoraModule m = inv[i];
    const std::string key_base =
        kKeyRoot +
        (m.group == "vision" ? std::string(kVisionPrefix) : prefix_seen.empty() ? std::string("model.") : prefix_seen) +
        (m.experts > 0 ? expert_key_module(m, experts_of_layer[m.layer].size() == 2) : m.path);
    if (!a_of.count(i)) missing.push_back(key_base + ".lora_A.weight");
    if (!b_of.count(i)) missing.push_back(key_base + ".lora_B.weight");
    if (!a_of.count(i) || !b_of.count(i)) continue;
    std::vector<std::string> names = full_names(m.path);
    int mr = r;
    if (const json* v = pattern_value(rank_pattern, names, cfg_name + " rank_pattern")) {
      check(v->is_number_integer() && v->get<int>() > 0, cfg_name + ": rank_pattern values must be positive integers");
      mr = v->get<int>();
    }
    double malpha = alpha;
    if (const json* v = pattern_value(alpha_pattern, names, cfg_name + " alpha_pattern")) {
      check(v->is_number(), cfg_name + ": alpha_pattern values must be numbers");
      malpha = v->get<double>();
    }
    m.r = mr;
    m.scaling = static_cast<float>(rslora ? malpha / std::sqrt(double(mr)) : malpha / mr);
    const int64_t rows = m.experts > 0 ? int64_t(mr) * m.experts : mr;
    Tensor A = a_of[i], B = b_of[i];
    const std::string ka = key_base + ".lora_A.weight", kb = key_base + ".lora_B.weight";
    if (m.experts > 0 && A.shape != Shape({rows, m.in}) && old_orientation_possible &&
        A.shape == Shape({rows, m.out}) && B.shape == Shape({m.in, rows})) {
      Tensor a2, b2;
      convert_old_expert_orientation(m, mr, A, B, a2, b2);
      A = a2;
      B = b2;
    }
    // A rank that differs from the config is the common mistake; say so rather than only "shape".
    const int64_t a_rank = m.experts > 0 ? A.dim(0) / m.experts : A.dim(0);
    check(A.dim(0) == rows || A.dim(1) != m.in,
          wname + ": tensor " + ka + " has rank " + std::to_string(a_rank) + " but " + cfg_name + " says r = " +
              std::to_string(mr) + " (shape " + shape_str(A.shape) + ", expected " + shape_str({rows, m.in}) + ")");
    check(A.shape == Shape({rows, m.in}), wname + ": tensor " + ka + " has shape " + shape_str(A.shape) +
                                              ", expected " + shape_str({rows, m.in}) + " for module " + m.path);
    check(B.shape == Shape({m.out, rows}), wname + ": tensor " + kb + " has shape " + shape_str(B.shape) +
                                               ", expected " + shape_str({m.out, rows}) + " for module " + m.path);
    m.A = A;
    m.B = B;
    adapter.modules.push_back(std::move(m));
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 4; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 4) list += ", ... (" + std::to_string(missing.size()) + " in all)";
    throw Error(wname + ": missing tensors for modules that " + cfg_name + " targets: " + list);
  }
  adapter.reindex();
  return adapter;
}

}  // namespace deltatune
