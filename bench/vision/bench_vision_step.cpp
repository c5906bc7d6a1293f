// A vision + text LoRA training step of the 9B shape on one GPU: the random-weight Qwen3.5-9B text model
// (bench/common/random_qwen35.h) with the 9B vision tower (bench/common/random_vision_tower.h), --rows rows of
// --tokens tokens, each holding one --side x --side image (1024 merged image tokens at 1024) between vision
// start/end tokens, the rest random text; labels train the text tokens only (never image tokens, as the data
// pipeline builds them). LoRA r 16 on the default groups (the text model's linears; the tower frozen, as by
// default), --vision-lora 1 adds the `vision` group (the tower's blocks, backward through the tower).
// Times forward + backward + grad norm + AdamW (median of --steps after --warmup) and prints a table and one JSON
// line: tokens/s, images/s, peak VRAM (the allocator's peak, weights included). hf_vision_step.py runs
// transformers' Qwen3_5ForConditionalGeneration + PEFT on the same rows (run_vision_step.sh runs both).
//
//   bench_vision_step [--tokens 4096] [--rows 1] [--side 1024] [--steps 5] [--warmup 2] [--ckpt 1]
//                     [--vision-lora 0|1] [--layers N] [--depth 27]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "data/batch.h"
#include "data/batch_images.h"
#include "lora/lora.h"
#include "model/qwen35_model.h"
#include "train/optimizer.h"
#include "vision/image_processor.h"
#include "../common/random_qwen35.h"
#include "../common/random_vision_tower.h"

using namespace deltatune;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 4096, rows = 1, side = 1024, layers = 0, depth = 27;
  int steps = 5, warmup = 2;
  bool ckpt = true, vision_lora = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") tokens = std::atoll(v.c_str());
    else if (a == "--rows") rows = std::atoll(v.c_str());
    else if (a == "--side") side = std::atoll(v.c_str());
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--ckpt") ckpt = std::atoi(v.c_str()) != 0;
    else if (a == "--vision-lora") vision_lora = std::atoi(v.c_str()) != 0;
    else if (a == "--layers") layers = std::atoll(v.c_str());
    else if (a == "--depth") depth = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    check(side % 32 == 0, "--side must be a multiple of 32 (patch 16 x merge 2)");
    ModelConfig cfg = bench::shape_config("9b", layers);
    const VisionConfig vc = bench::vision_config_9b(depth);
    cfg.vision_depth = vc.depth, cfg.vision_hidden = vc.hidden, cfg.vision_intermediate = vc.intermediate;
    const int64_t g = side / vc.patch_size, image_tokens = g * g / (vc.merge_size * vc.merge_size);
    check(tokens >= image_tokens + 8, "--tokens must hold the image's " + std::to_string(image_tokens) +
                                          " tokens and some text");
    const double t0 = now_s();
    const ModelWeights w = bench::random_weights(cfg);
    const bench::ValueBank bank(size_t(1) << 24);
    size_t at = 0;
    const auto tower = bench::random_vision_tower(vc, bank, at);
    auto be = make_cuda_backend(0, DType::BF16);
    Qwen35Model model(w, *be);
    model.set_vision(tower);
    be->synchronize();
    const double t_load = now_s() - t0;

    LoraSpec spec;
    spec.r = 16;
    spec.alpha = 32;
    spec.groups = lora_default_groups(cfg);
    if (vision_lora) spec.groups.push_back("vision");
    LoraAdapter adapter = lora_create(cfg, spec, 1);
    lora_to_backend(adapter, *be);

    // Each row: text, <vision_start>, the image's tokens, <vision_end>, text; the image pixels random in about
    // the normalised range.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tok(0, 240000);
    const int64_t before = (tokens - image_tokens - 2) / 8;
    std::vector<Example> ex(static_cast<size_t>(rows));
    std::vector<ProcessedImage> images(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      Example& e = ex[size_t(r)];
      for (int64_t t = 0; t < tokens; ++t) {
        int32_t id = tok(rng);
        if (t == before) id = int32_t(vc.vision_start_token_id);
        else if (t > before && t <= before + image_tokens) id = int32_t(vc.image_token_id);
        else if (t == before + image_tokens + 1) id = int32_t(vc.vision_end_token_id);
        e.input_ids.push_back(id);
        e.labels.push_back(t >= before && t <= before + image_tokens + 1 ? -100 : id);
      }
      ProcessedImage& im = images[size_t(r)];
      im.grid_t = 1, im.grid_h = g, im.grid_w = g;
      im.pixel_values = bank.take(size_t(g * g * vc.patch_features()), at);
      for (float& p : im.pixel_values) p *= 50.f;
    }
    std::vector<const Example*> ptrs;
    for (auto& e : ex) ptrs.push_back(&e);
    Batch batch = batch_from_examples(ptrs);
    std::vector<const ProcessedImage*> iptrs;
    for (const auto& im : images) iptrs.push_back(&im);
    batch_set_images(batch, iptrs, vc, "bench_vision_step");

    OptimizerSettings os;
    StepOptions so;
    so.backward = true;
    so.grad_scale = 1.f / static_cast<float>(batch.num_targets);
    so.fused_loss = true;
    so.gradient_checkpointing = ckpt;
    so.checkpoint_layers = -1;
    so.loss_chunk_rows = 1024;
    std::vector<double> times;
    double loss = 0;
    for (int s = 1; s <= warmup + steps; ++s) {
      be->synchronize();
      const double a = now_s();
      lora_zero_grad(adapter, *be);
      const StepOutput out = model.step(batch, &adapter, so);
      loss = out.loss_sum / static_cast<double>(batch.num_targets);
      const double norm = lora_grad_norm(adapter, *be);
      optimizer_step(adapter, *be, os, 1e-5, s, norm);
      be->synchronize();
      if (s > warmup) times.push_back(now_s() - a);
      std::fprintf(stderr, "step %d: %.1f ms loss %.4f\n", s, (now_s() - a) * 1e3, loss);
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    const MemoryStats ms = be->memory_stats();
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double tps = double(tokens * rows) / med, ips = double(rows) / med;
    std::printf("%-10s %-6s %-7s %-6s %-6s %-10s %-10s %-9s %-9s %-8s %s\n", "impl", "rows", "tokens", "side", "ckpt",
                "step_ms", "tok/s", "images/s", "peak_GiB", "loss", "device");
    std::printf("%-10s %-6lld %-7lld %-6lld %-6s %-10.1f %-10.0f %-9.2f %-9.2f %-8.4f %s\n", "deltatune",
                static_cast<long long>(rows), static_cast<long long>(tokens), static_cast<long long>(side),
                ckpt ? "all" : "none", med * 1e3, tps, ips, ms.peak_allocated_bytes / gib, loss, be->name().c_str());
    std::printf(
        "{\"bench\":\"vision_step\",\"impl\":\"deltatune\",\"shape\":\"9b\",\"layers\":%lld,\"depth\":%lld,\"rows\":%lld,"
        "\"tokens\":%lld,\"image_tokens\":%lld,\"side\":%lld,\"gradient_checkpointing\":%s,\"vision_lora\":%s,"
        "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"images_per_s\":%.3f,\"peak_vram_gib\":%.3f,\"loss\":%.5f,"
        "\"lora_params\":%lld,\"load_s\":%.1f,\"device\":\"%s\"}\n",
        static_cast<long long>(cfg.num_layers), static_cast<long long>(depth), static_cast<long long>(rows),
        static_cast<long long>(tokens), static_cast<long long>(image_tokens), static_cast<long long>(side),
        ckpt ? "true" : "false", vision_lora ? "true" : "false", med * 1e3, tps, ips, ms.peak_allocated_bytes / gib,
        loss, static_cast<long long>(adapter.trainable_params()), t_load, be->name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vision_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
