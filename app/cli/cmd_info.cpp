// `deltatune info [--model DIR] [--json]`: the GPU runtime (driver, CUDA runtime, GPUs and their kernel path)
// and, with --model, what a checkpoint folder holds, LoRA sizes and a VRAM estimate.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/gpu_info.h"
#include "deltatune/memory_plan.h"
#include "deltatune/distributed.h"
#include "deltatune/model_info.h"
#include "deltatune/shard_plan.h"
#include "gpu_report.h"

namespace deltatune::cli {

namespace {

std::string grouped(int64_t n) {  // 1234567 -> "1,234,567"
  std::string s = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string bytes_str(int64_t b) {
  char buf[32];
  const double x = static_cast<double>(b);
  if (x >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", x / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", x / (1024.0 * 1024));
  return buf;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text + ",") {
    if (ch != ',') {
      cur += ch;
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  return out;
}

std::string join_commas(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

// A checkpoint folder, or a config.json (or a folder holding only one) for a model not downloaded yet.
ModelInfo load_model_info(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return model_info_from_config(path);
  bool has_weights = false;
  for (const auto& e : fs::directory_iterator(path, ec))
    has_weights |= e.path().extension() == ".safetensors" || e.path().filename() == "model.safetensors.index.json";
  if (!has_weights && fs::is_regular_file(fs::path(path) / "config.json", ec))
    return model_info_from_config((fs::path(path) / "config.json").string());
  return model_info_load(path);
}

// The GPUs the multi-GPU plan is for: --gpu-count / --gpu-memory as stated, else the --gpus list's devices
// (the smallest one's memory decides: every GPU must hold its share).
GpuPool plan_gpus(const ParsedArgs& a, const GpuEnvironment& env) {
  GpuPool pool;
  std::vector<int> ids;
  bool all = false;
  if (a.options.count("--gpus")) {
    const GpuSelection sel = parse_gpu_list(a.get("--gpus"));
    all = sel.all;
    if (sel.all)
      for (const GpuDevice& d : env.devices) ids.push_back(d.index);
    else
      ids = sel.ids;
  }
  pool.count = a.options.count("--gpu-count") ? static_cast<int>(int_option("--gpu-count", a.get("--gpu-count"), 1))
                                               : std::max<int>(1, static_cast<int>(ids.size()));
  if (a.options.count("--gpu-memory")) {
    const std::string v = a.get("--gpu-memory");
    try {
      pool.memory_bytes = parse_memory_size(v);
    } catch (const Error& e) {
      throw Error(std::string("option --gpu-memory: ") + e.what());
    }
    // A bare number is bytes: "--gpu-memory 80" would plan for 80-byte GPUs and refuse everything.
    if (pool.memory_bytes < (int64_t(1) << 30))
      throw Error("option --gpu-memory '" + v + "' is " + std::to_string(pool.memory_bytes) +
                  " bytes, less than 1 GiB: give the unit, e.g. --gpu-memory " + v + "GiB (or " + v + "GB)");
    return pool;
  }
  check(!all || !env.devices.empty(),
        "--gpus all: this machine shows no CUDA GPU; state the GPUs with --gpu-count N --gpu-memory 80GiB");
  for (int id : ids) {
    const GpuDevice* dev = nullptr;
    for (const GpuDevice& d : env.devices)
      if (d.index == id) dev = &d;
    check(dev != nullptr, "--gpus " + a.get("--gpus") + ": GPU " + std::to_string(id) +
                              " is not on this machine (" + std::to_string(env.devices.size()) +
                              " found); state the GPUs with --gpu-count N --gpu-memory 80GiB");
    if (pool.memory_bytes == 0 || dev->total_bytes < pool.memory_bytes) pool.memory_bytes = dev->total_bytes;
  }
  check(pool.memory_bytes > 0, "the multi-GPU plan needs the GPUs' memory: --gpus with GPUs present, or "
                               "--gpu-memory 80GiB");
  return pool;
}

nlohmann::ordered_json plan_json(const ShardPlan& p) {
  nlohmann::ordered_json j;
  j["gpu_count"] = p.gpus.count;
  j["gpu_memory"] = p.gpus.memory_bytes;
  j["lora_groups"] = p.lora_groups;
  j["base_quantization"] = p.settings.base_quantization;
  j["margin"] = p.settings.margin_bytes;
  j["checkpoint_layers"] = !p.settings.gradient_checkpointing ? 0 : p.settings.checkpoint_layers;  // -1: all
  j["layouts"] = nlohmann::ordered_json::array();
  for (const LayoutEstimate& e : p.layouts) {
    nlohmann::ordered_json l{{"layout", weight_layout_name(e.layout)}, {"applicable", e.applicable}};
    if (!e.applicable) l["not_applicable"] = e.not_applicable;
    l["frozen_resident"] = e.frozen_resident;
    l["gathered_in_flight"] = e.gathered_in_flight;
    l["lora_and_optimizer"] = e.lora_and_optimizer;
    l["activations"] = e.activations;
    l["logits"] = e.logits;
    l["exchange_buffers"] = e.exchange_buffers;
    l["overhead"] = e.overhead;
    l["backend_buffers"] = e.backend_buffers;
    l["adapter_setup"] = e.adapter_setup;
    l["total"] = e.total;
    l["moved_per_micro_batch"] = e.moved_per_micro_batch;
    l["fits"] = e.fits;
    j["layouts"].push_back(l);
  }
  j["chosen"] = p.choice() ? nlohmann::ordered_json(weight_layout_name(p.choice()->layout)) : nlohmann::ordered_json();
  j["reason"] = p.reason;
  j["would_fit"] = p.would_fit;
  return j;
}

}  // namespace

int cmd_info(const Args& args) {
  const ParsedArgs a = parse_args(args,
                                  {"--model", "--lora-r", "--tokens", "--checkpoint-layers", "--gpus", "--gpu-count",
                                   "--gpu-memory", "--lora-groups", "--base-quantization", "--gpu", "--free-gib",
                                   "--image-tokens", "--images", "--max-pixels", "--loss-logits"},
                                  {"--json", "--gradient-checkpointing", "--no-gradient-checkpointing",
                                   "--unfused-loss", "--vision-lora", "--no-activation-offload"});
  check(a.positionals.empty(),
        (a.positionals.empty() ? std::string() : "unexpected argument '" + a.positionals[0] +
                                                     "' (a checkpoint goes after --model)\n") +
        "usage: deltatune info [--model DIR|config.json] [--json] [--lora-r N] [--tokens N] "
        "[--gradient-checkpointing [--checkpoint-layers N] | --no-gradient-checkpointing | [--gpu N] "
        "[--free-gib X] [--no-activation-offload]] [--unfused-loss] [--loss-logits fp32|bf16] "
        "[--base-quantization none|fp8|nf4] "
        "[--gpus 0,1,..|all] [--gpu-count N] [--gpu-memory 80GiB] [--lora-groups attn,linear_attn,...] "
        "[--image-tokens N | --images N [--max-pixels P]] [--vision-lora]");
  const int r = static_cast<int>(int_option("--lora-r", a.get("--lora-r", "16"), 1));
  const int64_t tokens = int_option("--tokens", a.get("--tokens", "4096"), 1);
  // Neither checkpointing flag: gradient_checkpointing: auto, planned for --free-gib or the free memory of GPU --gpu.
  bool ckpt = a.flags.count("--gradient-checkpointing") != 0;
  const bool planned = !ckpt && a.flags.count("--no-gradient-checkpointing") == 0;
  check(!(ckpt && a.flags.count("--no-gradient-checkpointing")),
        "options --gradient-checkpointing and --no-gradient-checkpointing exclude each other");
  const bool fused = a.flags.count("--unfused-loss") == 0;
  // The run file's activation_offload: false.
  const bool activation_offload = a.flags.count("--no-activation-offload") == 0;
  // The run config's loss_logits: the fused loss's logits in fp32 (default) or bf16 (smaller loss buffers).
  const LossLogits loss_logits = loss_logits_from_name(a.get("--loss-logits", "fp32"), "option --loss-logits");
  int64_t ckpt_layers = int_option("--checkpoint-layers", a.get("--checkpoint-layers", "-1"), -1);
  const int gpu_index = static_cast<int>(int_option("--gpu", a.get("--gpu", "0"), 0));
  double free_gib = 0;
  if (a.options.count("--free-gib")) {
    const std::string v = a.get("--free-gib");
    try {
      size_t used = 0;
      free_gib = std::stod(v, &used);
      if (used != v.size()) free_gib = 0;
    } catch (const std::exception&) {
    }
    check(free_gib > 0, "option --free-gib expects a number of GiB > 0, got '" + v + "'");
  }

  const GpuEnvironment gpu = gpu_environment();
  if (!a.options.count("--model")) {
    if (a.flags.count("--json"))
      std::cout << nlohmann::ordered_json{{"gpu", gpu_report_json(gpu)}}.dump() << "\n";
    else
      std::cout << gpu_report_text(gpu);
    return 0;
  }
  const ModelInfo info = load_model_info(a.get("--model"));
  const std::string quant = a.get("--base-quantization", "none");
  // Image rows: merged image tokens per micro-batch as stated (`deltatune prepare` prints the data's), or
  // --images images resized within --max-pixels (default: the preprocessor's max_pixels).
  check(!(a.options.count("--image-tokens") && a.options.count("--images")),
        "options --image-tokens and --images exclude each other");
  ImageLoad images;
  const int64_t max_pixels = int_option("--max-pixels", a.get("--max-pixels", "0"), 0);
  if (a.options.count("--image-tokens")) images.image_tokens_per_step = int_option("--image-tokens", a.get("--image-tokens"), 0);
  if (a.options.count("--images"))
    images.image_tokens_per_step = int_option("--images", a.get("--images"), 0) * image_tokens_for_pixels(info, max_pixels);
  check(images.image_tokens_per_step == 0 || info.vision.present,
        a.get("--model") + ": --image-tokens / --images need a vision-language checkpoint (config.json has no "
                           "vision_config)");
  check(images.image_tokens_per_step <= tokens,
        "--image-tokens / --images: " + std::to_string(images.image_tokens_per_step) +
            " image tokens do not fit in --tokens " + std::to_string(tokens) + " (image tokens are part of the sequence)");
  std::vector<std::string> lora_groups = split_commas(a.get("--lora-groups"));
  for (const std::string& g : lora_groups) {
    if (g == "vision") continue;  // checked with --vision-lora below
    if (std::find(info.lora_groups.begin(), info.lora_groups.end(), g) == info.lora_groups.end()) {
      std::string have;
      for (const std::string& h : info.lora_groups) have += (have.empty() ? "" : ", ") + h;
      throw Error("--lora-groups: '" + g + "' is not a LoRA group of " + a.get("--model") + " (it has: " + have + ")");
    }
  }
  // --vision-lora: the `vision` group on top of --lora-groups (or of the default groups).
  const bool vision_lora = a.flags.count("--vision-lora") != 0 ||
                           std::find(lora_groups.begin(), lora_groups.end(), "vision") != lora_groups.end();
  if (vision_lora) {
    check(info.vision.present, a.get("--model") + ": --vision-lora / LoRA group vision need a vision-language "
                                                  "checkpoint (config.json has no vision_config)");
    if (lora_groups.empty()) lora_groups = lora_default_groups(info);
    if (std::find(lora_groups.begin(), lora_groups.end(), "vision") == lora_groups.end()) lora_groups.push_back("vision");
  }
  // The single-GPU memory plan (gradient_checkpointing: auto).
  int64_t free = static_cast<int64_t>(free_gib * 1024 * 1024 * 1024);
  std::string free_from = "--free-gib";
  if (planned && free == 0) {
    for (const GpuDevice& d : gpu.devices)
      if (d.index == gpu_index) {
        free = d.free_bytes > 0 ? d.free_bytes : d.total_bytes;
        free_from = "GPU " + std::to_string(d.index) + " (" + d.name + ")" +
                    (d.free_bytes > 0 ? "" : ", total memory: free unknown");
      }
  }
  std::optional<MemoryPlan> mem_plan;
  if (planned && free > 0) {
    MemoryPlanRequest req;
    req.lora_r = r;
    req.tokens_per_step = tokens;
    req.fused_loss = fused;
    req.loss_logits = loss_logits;
    req.base_quantization = quant;
    req.free_bytes = free;
    req.images = images;
    req.lora_groups = lora_groups;
    req.host_offload = activation_offload;  // planned for a CUDA GPU: its backend can stash inputs in host memory
    mem_plan = plan_memory(info, req);
    ckpt = mem_plan->gradient_checkpointing;
    ckpt_layers = mem_plan->checkpoint_layers;
  }
  const bool want_plan = a.options.count("--gpus") || a.options.count("--gpu-count") || a.options.count("--gpu-memory");
  ShardPlan plan;
  if (want_plan) {
    ShardPlanSettings s;
    s.lora_r = r;
    s.lora_groups = lora_groups;
    s.tokens_per_step = tokens;
    s.fused_loss = fused;
    s.loss_logits = loss_logits;
    s.gradient_checkpointing = ckpt;
    s.checkpoint_layers = ckpt_layers;
    s.base_quantization = quant;
    s.images = images;
    const GpuPool pool = plan_gpus(a, gpu);
    // gradient_checkpointing: auto: the layout and the checkpointed layers are planned together for the stated GPUs
    // (one GPU too: `--gpu-memory 80GiB` asks about an 80 GiB card, not about this machine's).
    plan = planned ? plan_multi_gpu_auto_checkpointing(info, s, pool) : plan_multi_gpu(info, s, pool);
    if (planned && !mem_plan) {  // the estimate below then shows the planned checkpointing
      ckpt = plan.settings.gradient_checkpointing;
      ckpt_layers = plan.settings.checkpoint_layers;
    }
  }
  const bool planned_for_pool = planned && !mem_plan && want_plan;
  const auto lora = lora_params_per_group(info, r);
  int64_t lora_total = 0;
  for (const auto& kv : lora) lora_total += kv.second;
  VramEstimate vram =
      mem_plan ? mem_plan->estimate
               : estimate_vram(info, r, tokens, fused, ckpt, ckpt_layers, quant, 1024, images, lora_groups, false,
                               loss_logits);
  if (planned_for_pool && ckpt) {  // what the planned checkpointed layers keep for their recompute
    const int64_t kept = recompute_keep_bytes(info, tokens, ckpt_layers, plan.settings.keep);
    vram.activations += kept;
    vram.total += kept;
  }

  if (a.flags.count("--json")) {
    nlohmann::ordered_json j;
    j["dir"] = info.dir;
    j["model_type"] = info.model_type;
    j["architecture"] = info.architecture;
    j["is_moe"] = info.is_moe;
    j["tied_embeddings"] = info.tied_embeddings;
    j["vision_language_layout"] = info.vision_language_layout;
    j["vocab_size"] = info.vocab_size;
    j["hidden_size"] = info.hidden_size;
    j["num_layers"] = info.num_layers;
    j["intermediate_size"] = info.intermediate_size;
    j["num_attention_heads"] = info.num_attention_heads;
    j["num_key_value_heads"] = info.num_key_value_heads;
    j["head_dim"] = info.head_dim;
    j["linear_num_key_heads"] = info.linear_num_key_heads;
    j["linear_num_value_heads"] = info.linear_num_value_heads;
    j["linear_key_head_dim"] = info.linear_key_head_dim;
    j["linear_value_head_dim"] = info.linear_value_head_dim;
    j["num_experts"] = info.num_experts;
    j["num_experts_per_tok"] = info.num_experts_per_tok;
    j["moe_intermediate_size"] = info.moe_intermediate_size;
    j["shared_expert_intermediate_size"] = info.shared_expert_intermediate_size;
    j["layer_types"] = info.layer_types;
    j["params_per_group"] = info.params_per_group;
    j["total_params"] = info.total_params;
    j["dtype_counts"] = info.dtype_counts;
    j["skipped_tensors"] = info.skipped_tensors;
    j["has_tokenizer"] = info.has_tokenizer;
    j["has_chat_template"] = info.has_chat_template;
    j["lora_groups"] = info.lora_groups;
    if (info.vision.present) {
      const VisionTowerInfo& v = info.vision;
      j["vision"] = {{"depth", v.depth}, {"hidden_size", v.hidden}, {"num_heads", v.heads},
                     {"intermediate_size", v.intermediate}, {"out_hidden_size", v.out_hidden},
                     {"patch_size", v.patch_size}, {"temporal_patch_size", v.temporal_patch_size},
                     {"spatial_merge_size", v.merge_size}, {"params", v.params},
                     {"min_pixels", v.min_pixels}, {"max_pixels", v.max_pixels},
                     {"image_tokens_at_max_pixels", image_tokens_for_pixels(info)}, {"unusable", v.unusable}};
    }
    j["lora_r"] = r;
    j["lora_params_per_group"] = lora;
    j["lora_params_total"] = lora_total;
    j["vram_estimate"] = {{"tokens_per_step", tokens},
                          {"fused_loss", fused},
                          {"loss_logits", loss_logits_name(fused ? loss_logits : LossLogits::F32)},
                          {"gradient_checkpointing", ckpt},
                          {"checkpoint_layers", ckpt_layers},
                          {"loss_chunk_rows", mem_plan ? mem_plan->loss_chunk_rows : 1024},
                          {"weights", vram.weights},
                          {"lora_and_optimizer", vram.lora_and_optimizer},
                          {"activations", vram.activations},
                          {"logits", vram.logits},
                          {"overhead", vram.overhead},
                          {"backend_buffers", vram.backend_buffers},
                          {"lora_kcat_pad", vram.lora_kcat_pad},
                          {"image_tokens_per_step", images.image_tokens_per_step},
                          {"vision_lora", vision_lora},
                          {"vision_weights", vram.vision_weights},
                          {"vision_activations", vram.vision_activations},
                          {"total", vram.total}};
    if (mem_plan)
      j["memory_plan"] = {{"gradient_checkpointing", "auto"},
                          {"free_bytes", mem_plan->free_bytes},
                          {"free_from", free_from},
                          {"budget_bytes", mem_plan->budget_bytes},
                          {"fits", mem_plan->fits},
                          {"checkpoint_layers", mem_plan->checkpoint_layers},
                          {"loss_chunk_rows", mem_plan->loss_chunk_rows},
                          {"recompute_keep", recompute_keep_text(info, mem_plan->keep, mem_plan->checkpoint_layers)},
                          {"recompute_keep_bytes", mem_plan->keep_bytes},
                          {"inputs_on_host", mem_plan->keep.inputs_on_host},
                          {"host_bytes", mem_plan->host_bytes},
                          {"expected_peak_bytes", mem_plan->estimate.total},
                          {"text", memory_plan_text(info, *mem_plan)}};
    else if (planned_for_pool)
      j["memory_plan"] = {{"gradient_checkpointing", "auto"}, {"text", "planned with the layout (multi_gpu_plan)"}};
    else if (planned)
      j["memory_plan"] = {{"gradient_checkpointing", "auto"},
                          {"text", "no GPU " + std::to_string(gpu_index) + " to plan for (pass --free-gib)"}};
    if (want_plan) j["multi_gpu_plan"] = plan_json(plan);
    j["warnings"] = info.warnings;
    j["gpu"] = gpu_report_json(gpu);
    std::cout << j.dump() << "\n";
    return 0;
  }

  std::ostringstream o;
  o << info.dir << "\n";
  o << "  " << info.model_type << (info.is_moe ? " (mixture of experts)" : " (dense)") << ", "
    << (info.architecture.empty() ? "no architectures entry" : info.architecture)
    << (info.vision.present ? ", vision-language (text model + vision tower)"
        : info.vision_language_layout ? ", vision-language layout (text part used)"
                                      : "")
    << "\n";
  int64_t full = 0;
  std::string pattern;
  for (const auto& t : info.layer_types) {
    const bool f = t == "full_attention";
    full += f;
    pattern += f ? 'F' : 'L';
  }
  o << "  hidden " << info.hidden_size << ", " << info.num_layers << " layers: " << pattern << " ("
    << info.num_layers - full << " Gated DeltaNet, " << full << " full attention)\n";
  o << "  full attention: " << info.num_attention_heads << " query heads, " << info.num_key_value_heads
    << " KV heads, head dim " << info.head_dim << "\n";
  o << "  Gated DeltaNet: " << info.linear_num_key_heads << " key heads x " << info.linear_key_head_dim
    << ", " << info.linear_num_value_heads << " value heads x " << info.linear_value_head_dim << "\n";
  if (info.is_moe)
    o << "  experts: " << info.num_experts << ", " << info.num_experts_per_tok << " per token, expert FFN "
      << info.moe_intermediate_size << ", shared expert FFN " << info.shared_expert_intermediate_size << "\n";
  else
    o << "  MLP: intermediate " << info.intermediate_size << "\n";
  o << "  vocabulary " << info.vocab_size
    << (info.tied_embeddings ? ", tied embeddings" : ", separate lm_head") << "\n";
  o << "parameters: " << grouped(info.total_params) << "\n";
  for (const auto& [g, n] : info.params_per_group) o << "  " << g << ": " << grouped(n) << "\n";
  o << "tensors:";
  for (const auto& [dt, n] : info.dtype_counts) o << " " << dt << " x " << n;
  if (info.skipped_tensors) o << "; skipped (vision / MTP): " << info.skipped_tensors;
  o << "\n";
  if (info.vision.present) {
    const VisionTowerInfo& v = info.vision;
    o << "vision tower: " << v.depth << " blocks, hidden " << v.hidden << ", " << v.heads << " heads, MLP "
      << v.intermediate << ", patch " << v.patch_size << " (temporal " << v.temporal_patch_size << "), merge "
      << v.merge_size << "x" << v.merge_size << " -> " << v.out_hidden << ", " << grouped(v.params)
      << " parameters (frozen unless LoRA targets it)\n";
    o << "  images: " << grouped(v.min_pixels) << " to " << grouped(v.max_pixels) << " pixels, at most "
      << image_tokens_for_pixels(info) << " tokens an image\n";
    if (!v.unusable.empty()) o << "  image rows cannot be trained: " << v.unusable << "\n";
  }
  o << "tokenizer.json: " << (info.has_tokenizer ? "yes" : "no")
    << ", chat template: " << (info.has_chat_template ? "yes" : "no") << "\n";
  o << "LoRA r=" << r << " trainable parameters:";
  for (const auto& [g, n] : lora) o << " " << g << " " << grouped(n);
  o << " (all " << grouped(lora_total) << ")\n";
  if (mem_plan)
    o << "gradient_checkpointing: auto for " << free_from << ": " << memory_plan_text(info, *mem_plan) << "\n";
  else if (planned_for_pool)
    o << "gradient_checkpointing: auto, planned with the layout for the GPUs below\n";
  else if (planned)
    o << "gradient_checkpointing: auto: no GPU " << gpu_index
      << " to plan for (pass --free-gib X); the estimate below is without checkpointing\n";
  o << "VRAM estimate (" << tokens << " tokens/step, "
    << (!fused ? "unfused loss, " : loss_logits == LossLogits::BF16 ? "fused loss with bf16 logits, " : "fused loss, ")
    << (ckpt ? "with" : "no")
    << " gradient checkpointing, LoRA on "
    << (lora_groups.empty() ? std::string("the default groups") : join_commas(lora_groups)) << "): " << bytes_str(vram.total) << "\n"
    << "  weights " << bytes_str(vram.weights) << ", LoRA+optimizer " << bytes_str(vram.lora_and_optimizer)
    << ", activations " << bytes_str(vram.activations) << ", logits " << bytes_str(vram.logits)
    << ", overhead " << bytes_str(vram.overhead + vram.backend_buffers) << "\n";
  if (const auto embed = info.params_per_group.find("embed"); !info.tied_embeddings && embed != info.params_per_group.end())
    o << "  not on the GPU: the embedding table (untied from the lm_head), " << bytes_str(2 * embed->second)
      << " in bf16, stays in host memory and its rows are read over the bus\n";
  if (images.image_tokens_per_step > 0)
    o << "  images: " << images.image_tokens_per_step << " image tokens/step ("
      << images.image_tokens_per_step * info.vision.patches_per_token() << " patches), vision tower "
      << (vision_lora ? "trained (LoRA)" : "frozen") << ": weights " << bytes_str(vram.vision_weights)
      << ", activations " << bytes_str(vram.vision_activations) << "\n";
  if (want_plan) {
    o << shard_plan_text(plan);
  }
  if (!info.warnings.empty()) {
    o << "warnings:\n";
    for (const auto& w : info.warnings) o << "  - " << w << "\n";
  }
  o << gpu_report_text(gpu);
  std::cout << o.str();
  return 0;
}

}  // namespace deltatune::cli
