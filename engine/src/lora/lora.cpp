#include "lora/lora.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <tuple>

#include "backend/backend.h"
#include "core/error.h"
#include "deltatune/model_info.h"
#include "lora/lora_b_layout.h"

namespace deltatune {

namespace {

const std::vector<std::string>& all_groups() {
  static const std::vector<std::string> g = {"attn", "linear_attn", "mlp", "shared_expert", "experts", "vision"};
  return g;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// PEFT's list matching (tuners_utils.check_target_module_exists): exact name or a dot-bounded suffix. PEFT
// matches against the full module name, which carries the class prefix, so a target written with either
// prefix ("model.layers.0.mlp.up_proj", "model.language_model.layers.0...") is accepted as well.
bool suffix_matches(const std::string& path, const std::string& target) {
  for (const std::string& name : {path, "model." + path, "model.language_model." + path}) {
    if (name == target) return true;
    if (name.size() > target.size() && name.compare(name.size() - target.size(), target.size(), target) == 0 &&
        name[name.size() - target.size() - 1] == '.')
      return true;
  }
  return false;
}

LoraModule make_module(int layer, const std::string& group, const std::string& parent, const std::string& suffix,
                       int64_t in, int64_t out, int64_t experts = 0) {
  LoraModule m;
  m.layer = layer;
  m.group = group;
  m.suffix = suffix;
  m.path = "layers." + std::to_string(layer) + "." + parent + "." + suffix;
  m.in = in;
  m.out = out;
  m.experts = experts;
  return m;
}

// Per-module stream so that selecting another group does not change the init of the modules already chosen.
uint64_t path_seed(uint64_t seed, const std::string& path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : path) h = (h ^ c) * 1099511628211ull;
  return seed ^ (h + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
}

void init_uniform(Tensor& t, double bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  float* p = t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    // Top 53 bits -> [0, 1): identical on every platform, unlike std::uniform_real_distribution.
    const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<float>(bound * (2.0 * u - 1.0));
  }
}

}  // namespace

LoraModule* LoraAdapter::find(const std::string& path) {
  auto it = by_path.find(path);
  return it == by_path.end() ? nullptr : &modules[it->second];
}

const LoraModule* LoraAdapter::find(const std::string& path) const {
  auto it = by_path.find(path);
  return it == by_path.end() ? nullptr : &modules[it->second];
}

int64_t LoraAdapter::trainable_params() const {
  int64_t n = 0;
  for (const LoraModule& m : modules) n += m.A.numel() + m.B.numel();
  return n;
}

std::map<std::string, int64_t> LoraAdapter::params_per_group() const {
  std::map<std::string, int64_t> out;
  for (const LoraModule& m : modules) out[m.group] += m.A.numel() + m.B.numel();
  return out;
}

void LoraAdapter::reindex() {
  by_path.clear();
  for (size_t i = 0; i < modules.size(); ++i) by_path[modules[i].path] = i;
}

std::vector<std::string> lora_groups_of(const ModelConfig& cfg) {
  bool has_full = false, has_lin = false;
  for (LayerKind k : cfg.layer_types) (k == LayerKind::FullAttention ? has_full : has_lin) = true;
  std::vector<std::string> g;
  if (has_full) g.push_back("attn");
  if (has_lin) g.push_back("linear_attn");
  if (cfg.is_moe()) {
    if (cfg.has_shared_expert()) g.push_back("shared_expert");
    g.push_back("experts");
  } else {
    g.push_back("mlp");
  }
  if (cfg.has_vision()) g.push_back("vision");
  return g;
}

std::vector<std::string> lora_group_suffixes(const std::string& group) {
  if (group == "attn") return {"q_proj", "k_proj", "v_proj", "o_proj"};
  if (group == "linear_attn") return {"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"};
  if (group == "mlp") return {"gate_proj", "up_proj", "down_proj"};
  if (group == "shared_expert")
    return {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"};
  if (group == "experts") return {"experts.gate_up_proj", "experts.down_proj"};
  if (group == "vision") return {"attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"};
  throw Error("unknown LoRA target group '" + group + "' (valid: " + join(all_groups()) + ")");
}

std::vector<std::string> lora_default_groups(const ModelConfig& cfg) {
  std::vector<std::string> g = lora_groups_of(cfg);
  g.erase(std::remove_if(g.begin(), g.end(), [](const std::string& n) { return !lora_group_is_default(n); }), g.end());
  return g;
}

std::vector<LoraModule> lora_inventory(const ModelConfig& cfg) {
  check(static_cast<int64_t>(cfg.layer_types.size()) == cfg.num_layers,
        "config: layer_types has " + std::to_string(cfg.layer_types.size()) + " entries, expected num_hidden_layers = " +
            std::to_string(cfg.num_layers));
  const int64_t H = cfg.hidden_size;
  std::vector<LoraModule> inv;
  for (int i = 0; i < static_cast<int>(cfg.num_layers); ++i) {
    if (cfg.layer_types[static_cast<size_t>(i)] == LayerKind::FullAttention) {
      const int64_t q = cfg.num_heads * cfg.head_dim, kv = cfg.num_kv_heads * cfg.head_dim;
      inv.push_back(make_module(i, "attn", "self_attn", "q_proj", H, 2 * q));
      inv.push_back(make_module(i, "attn", "self_attn", "k_proj", H, kv));
      inv.push_back(make_module(i, "attn", "self_attn", "v_proj", H, kv));
      inv.push_back(make_module(i, "attn", "self_attn", "o_proj", q, H));
    } else {
      inv.push_back(make_module(i, "linear_attn", "linear_attn", "in_proj_qkv", H, cfg.conv_dim()));
      inv.push_back(make_module(i, "linear_attn", "linear_attn", "in_proj_z", H, cfg.value_dim()));
      inv.push_back(make_module(i, "linear_attn", "linear_attn", "in_proj_a", H, cfg.lin_v_heads));
      inv.push_back(make_module(i, "linear_attn", "linear_attn", "in_proj_b", H, cfg.lin_v_heads));
      inv.push_back(make_module(i, "linear_attn", "linear_attn", "out_proj", cfg.value_dim(), H));
    }
    if (cfg.is_moe()) {
      const int64_t Is = cfg.shared_intermediate, Ie = cfg.moe_intermediate, E = cfg.num_experts;
      if (cfg.has_shared_expert()) {
        inv.push_back(make_module(i, "shared_expert", "mlp", "shared_expert.gate_proj", H, Is));
        inv.push_back(make_module(i, "shared_expert", "mlp", "shared_expert.up_proj", H, Is));
        inv.push_back(make_module(i, "shared_expert", "mlp", "shared_expert.down_proj", Is, H));
      }
      inv.push_back(make_module(i, "experts", "mlp", "experts.gate_up_proj", H, 2 * Ie, E));
      inv.push_back(make_module(i, "experts", "mlp", "experts.down_proj", Ie, H, E));
    } else {
      const int64_t I = cfg.intermediate_size;
      inv.push_back(make_module(i, "mlp", "mlp", "gate_proj", H, I));
      inv.push_back(make_module(i, "mlp", "mlp", "up_proj", H, I));
      inv.push_back(make_module(i, "mlp", "mlp", "down_proj", I, H));
    }
  }
  // The vision tower's blocks (path visual.blocks.N.*; the merger is not adapted).
  const int64_t vh = cfg.vision_hidden, vi = cfg.vision_intermediate;
  for (int i = 0; cfg.has_vision() && i < static_cast<int>(cfg.vision_depth); ++i) {
    for (auto [suffix, in, out] : {std::tuple{"attn.qkv", vh, 3 * vh}, std::tuple{"attn.proj", vh, vh},
                                   std::tuple{"mlp.linear_fc1", vh, vi}, std::tuple{"mlp.linear_fc2", vi, vh}}) {
      LoraModule m = make_module(i, "vision", "", suffix, in, out);
      m.path = "visual.blocks." + std::to_string(i) + "." + suffix;
      inv.push_back(m);
    }
  }
  return inv;
}

bool lora_target_matches(const LoraModule& m, const std::string& target) { return suffix_matches(m.path, target); }

LoraAdapter lora_create(const ModelConfig& cfg, const LoraSpec& spec, uint64_t seed) {
  check(spec.r > 0, "lora_r: must be a positive integer, got " + std::to_string(spec.r));
  check(std::isfinite(spec.alpha) && spec.alpha > 0, "lora_alpha: must be a positive number");
  check(spec.dropout >= 0 && spec.dropout < 1, "lora_dropout: must be in [0, 1)");

  const std::vector<LoraModule> inv = lora_inventory(cfg);
  const std::vector<std::string> model_groups = lora_groups_of(cfg);
  std::vector<std::string> groups = spec.groups;
  if (groups.empty() && spec.modules.empty() && spec.parameters.empty()) groups = lora_default_groups(cfg);

  std::vector<bool> chosen(inv.size(), false);
  for (const std::string& g : groups) {
    if (std::find(all_groups().begin(), all_groups().end(), g) == all_groups().end())
      throw Error("lora_target_groups: unknown group '" + g + "' (valid: " + join(all_groups()) + ")");
    if (g == "vision" && !cfg.has_vision())
      throw Error("lora_target_groups: group 'vision' needs a vision-language checkpoint, and this one's config.json "
                  "has no vision_config (its groups: " + join(model_groups) + ")");
    if (std::find(model_groups.begin(), model_groups.end(), g) == model_groups.end())
      throw Error("lora_target_groups: group '" + g + "' does not exist in this " + cfg.model_type +
                  " model (it has: " + join(model_groups) + ")");
    for (size_t i = 0; i < inv.size(); ++i)
      if (inv[i].group == g) chosen[i] = true;
  }
  for (const std::string& t : spec.modules) {
    bool any = false;
    for (size_t i = 0; i < inv.size(); ++i)
      if (inv[i].experts == 0 && suffix_matches(inv[i].path, t)) chosen[i] = any = true;
    if (!any) {
      std::string hint;
      for (const LoraModule& m : inv)
        if (m.experts > 0 && suffix_matches(m.path, t)) hint = " (expert tensors are parameters: use lora_target_parameters)";
      throw Error("lora_target_modules: '" + t + "' matches no adaptable linear module of this " + cfg.model_type +
                  " model" + hint + "; module names look like layers.N.self_attn.q_proj, layers.N.linear_attn.out_proj");
    }
  }
  for (const std::string& t : spec.parameters) {
    bool any = false;
    for (size_t i = 0; i < inv.size(); ++i)
      if (inv[i].experts > 0 && suffix_matches(inv[i].path, t)) chosen[i] = any = true;
    if (!any)
      throw Error("lora_target_parameters: '" + t + "' matches no 3-D expert parameter of this " + cfg.model_type +
                  " model" +
                  (cfg.is_moe() ? std::string(" (valid: mlp.experts.gate_up_proj, mlp.experts.down_proj)")
                                : std::string(" (a dense model has no expert parameters)")));
  }

  LoraAdapter a;
  a.r = spec.r;
  a.alpha = spec.alpha;
  a.dropout = spec.dropout;
  a.rslora = spec.rslora;
  const double s = spec.rslora ? spec.alpha / std::sqrt(static_cast<double>(spec.r)) : spec.alpha / spec.r;
  for (size_t i = 0; i < inv.size(); ++i) {
    if (!chosen[i]) continue;
    LoraModule m = inv[i];
    m.r = spec.r;
    m.scaling = static_cast<float>(s);
    const int64_t rows = m.experts > 0 ? static_cast<int64_t>(spec.r) * m.experts : spec.r;
    m.A = host_tensor({rows, m.in}, DType::F32);
    m.B = host_tensor({m.out, rows}, DType::F32);  // zero: the adapter starts as a no-op, as in PEFT
    // kaiming_uniform_(a=sqrt(5)) on a [rows, in] weight: bound = 1/sqrt(fan_in) with fan_in = in.
    init_uniform(m.A, 1.0 / std::sqrt(static_cast<double>(m.in)), path_seed(seed, m.path));
    a.modules.push_back(std::move(m));
  }
  check(!a.modules.empty(), "LoRA targets select no module (check lora_target_groups / lora_target_modules / "
                            "lora_target_parameters)");
  a.reindex();
  return a;
}

int lora_input_share_rank(const LoraModule& m) {
  if (m.experts > 0) return -1;
  static const char* const kOrders[][4] = {{"q_proj", "k_proj", "v_proj", nullptr},
                                           {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"},
                                           {"gate_proj", "up_proj", nullptr, nullptr}};
  const std::string leaf = m.path.substr(m.path.rfind('.') + 1);
  for (const auto& order : kOrders)
    for (int i = 0; i < 4 && order[i]; ++i)
      if (leaf == order[i]) return i;
  return -1;
}

void lora_to_backend(LoraAdapter& adapter, Backend& backend) {
  constexpr int64_t kAlign = 64;  // every gradient starts 256-byte aligned in grad_flat
  auto aligned = [](int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  int64_t total = 0;
  for (const LoraModule& m : adapter.modules)
    if (m.experts == 0) total += aligned(m.A.numel()) + aligned(m.B.numel());
  adapter.grad_flat = total > 0 ? backend.zeros({total}, DType::F32) : Tensor{};
  int64_t at = 0;
  auto take = [&](const Shape& shape, int64_t n) {
    Tensor g = adapter.grad_flat.slice(at, at + n).view(shape);
    at += aligned(n);
    return g;
  };
  for (LoraModule& m : adapter.modules) {
    m.A = backend.upload(m.A, DType::F32);
    m.B = lora_b_upload(backend, m, m.B);  // expert B: [E, out, r] on the backend
    // A host adapter's moments (expert parallel's resume); B's in B's backend layout.
    for (Tensor* t : {&m.mA, &m.vA})
      if (t->defined()) *t = backend.upload(*t, DType::F32);
    for (Tensor* t : {&m.mB, &m.vB})
      if (t->defined()) *t = lora_b_upload(backend, m, *t, t == &m.mB ? "B.exp_avg" : "B.exp_avg_sq");
    m.gA = m.gB = Tensor();
  }
  // The input-sharing groups' gA first, each group's side by side in share-rank order.
  std::map<std::string, std::vector<LoraModule*>> shared;
  for (LoraModule& m : adapter.modules)
    if (lora_input_share_rank(m) >= 0) shared[m.path.substr(0, m.path.rfind('.'))].push_back(&m);
  for (auto& [parent, ms] : shared) {
    std::sort(ms.begin(), ms.end(), [](const LoraModule* a, const LoraModule* b) {
      return lora_input_share_rank(*a) < lora_input_share_rank(*b);
    });
    for (LoraModule* m : ms) m->gA = take(m->A.shape, m->A.numel());
  }
  for (LoraModule& m : adapter.modules) {
    // Expert gradients apart (expert parallel: this GPU's slice, DataParallel::attach gives them their own).
    if (m.experts > 0) {
      m.gA = backend.zeros(m.A.shape, DType::F32);
      m.gB = backend.zeros(m.B.shape, DType::F32);
      continue;
    }
    if (!m.gA.defined()) m.gA = take(m.A.shape, m.A.numel());
    m.gB = take(m.B.shape, m.B.numel());
  }
}

void lora_zero_grad(LoraAdapter& adapter, Backend& backend) {
  bool flat = adapter.grad_flat.defined();
  for (const LoraModule& m : adapter.modules)
    if (m.experts == 0)
      flat = flat && m.gA.storage == adapter.grad_flat.storage && m.gB.storage == adapter.grad_flat.storage;
  if (flat) backend.fill(adapter.grad_flat, 0.f);
  else adapter.grad_flat = Tensor{};  // no longer every gradient's buffer: not kept alive for the others
  for (LoraModule& m : adapter.modules) {
    if (flat && m.experts == 0) continue;
    if (!m.gA.defined()) m.gA = backend.zeros(m.A.shape, DType::F32);
    else backend.fill(m.gA, 0.f);
    if (!m.gB.defined()) m.gB = backend.zeros(m.B.shape, DType::F32);
    else backend.fill(m.gB, 0.f);
  }
}

}  // namespace deltatune
