#include "vision/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"
#include "io/files.h"
#include "io/safetensors.h"

namespace deltatune {
namespace {

// Dot products accumulate in double: the reference should be closer to exact than HF's fp32 matmuls, so the
// comparison measures HF's rounding, not ours.
void linear(const VisionLinear& l, const float* x, int64_t rows, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < l.out; ++o) {
      double s = l.b.empty() ? 0.0 : l.b[size_t(o)];
      const float* wr = l.w.data() + o * l.in;
      const float* xr = x + r * l.in;
      for (int64_t i = 0; i < l.in; ++i) s += double(wr[i]) * xr[i];
      y[r * l.out + o] = float(s);
    }
}

void layer_norm(const VisionLayerNorm& n, const float* x, int64_t rows, int64_t dim, float* y) {
  constexpr double kEps = 1e-6;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= double(dim);
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(var / double(dim) + kEps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = float((xr[i] - mean) * inv * n.w[size_t(i)] + n.b[size_t(i)]);
  }
}

float gelu_tanh(float x) {
  const double v = x;
  return float(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
}

float gelu_erf(float x) { return float(0.5 * double(x) * (1.0 + std::erf(double(x) / std::sqrt(2.0)))); }

// A patch's (row, col) in its image's patch grid, from its index within the frame (merge blocks together).
std::array<int64_t, 2> patch_row_col(int64_t within, int64_t grid_w, int64_t merge) {
  const int64_t blocks_w = grid_w / merge;
  const int64_t in_col = within % merge, in_row = (within / merge) % merge;
  const int64_t block_col = (within / (merge * merge)) % blocks_w, block_row = within / (merge * merge * blocks_w);
  return {block_row * merge + in_row, block_col * merge + in_col};
}

// Bilinear taps (align_corners) into a table axis of `side` entries for position `index` of `size`, with the
// float32 arithmetic transformers' get_vision_interpolation_indices_and_weights uses.
void axis_taps(int64_t index, int64_t size, int64_t side, int64_t taps[2], float weights[2]) {
  const float src = float(index) * float(side - 1) / float(std::max<int64_t>(size - 1, 1));
  const float fl = std::floor(src);
  for (int k = 0; k < 2; ++k) {
    taps[k] = std::clamp<int64_t>(int64_t(fl) + k, 0, side - 1);
    weights[k] = std::max(0.f, 1.f - std::abs(src - fl - float(k)));
  }
}

std::vector<float> load_f32(const CheckpointReader& ckpt, const std::string& key, int64_t numel,
                            const std::string& expected) {
  check(ckpt.has(key), ckpt.dir() + ": vision tower tensor `" + key + "` is missing");
  Tensor t = host_convert(ckpt.get(key), DType::F32);
  check(t.numel() == numel, ckpt.dir() + ": `" + key + "` has " + std::to_string(t.numel()) + " values, expected " +
                                expected);
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

VisionLinear load_linear(const CheckpointReader& ckpt, const std::string& name, int64_t out, int64_t in) {
  VisionLinear l;
  l.out = out;
  l.in = in;
  l.w = load_f32(ckpt, name + ".weight", out * in, std::to_string(out) + "x" + std::to_string(in));
  l.b = load_f32(ckpt, name + ".bias", out, std::to_string(out));
  return l;
}

VisionLayerNorm load_norm(const CheckpointReader& ckpt, const std::string& name, int64_t dim) {
  const VisionLinear l = load_linear(ckpt, name, dim, 1);
  return VisionLayerNorm{l.w, l.b};
}

int64_t json_int(const nlohmann::json& j, const char* key, const std::string& path,
                 const char* where = "vision_config.") {
  check(j.contains(key) && j[key].is_number_integer(), path + ": " + where + key + " is missing or not an integer");
  return j[key].get<int64_t>();
}

}  // namespace

VisionConfig vision_config_read(const std::string& model_dir) {
  std::error_code ec;  // a config.json itself (planning from a published config), or the checkpoint folder holding it
  const std::string path = std::filesystem::is_regular_file(model_dir, ec)
                               ? model_dir
                               : (std::filesystem::path(model_dir) / "config.json").string();
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  check(root.contains("vision_config") && root["vision_config"].is_object(),
        path + ": no vision_config (a text-only checkpoint has no vision tower)");
  const auto& v = root["vision_config"];
  VisionConfig c;
  c.depth = json_int(v, "depth", path);
  c.hidden = json_int(v, "hidden_size", path);
  c.heads = json_int(v, "num_heads", path);
  c.intermediate = json_int(v, "intermediate_size", path);
  c.patch_size = json_int(v, "patch_size", path);
  c.temporal_patch_size = json_int(v, "temporal_patch_size", path);
  c.merge_size = json_int(v, "spatial_merge_size", path);
  c.num_position_embeddings = json_int(v, "num_position_embeddings", path);
  c.out_hidden = json_int(v, "out_hidden_size", path);
  if (v.contains("in_channels")) c.in_channels = json_int(v, "in_channels", path);
  for (auto [key, field] : {std::pair{"image_token_id", &c.image_token_id},
                             std::pair{"vision_start_token_id", &c.vision_start_token_id},
                             std::pair{"vision_end_token_id", &c.vision_end_token_id}})
    if (root.contains(key)) *field = json_int(root, key, path, "");
  if (v.contains("hidden_act") && v["hidden_act"].is_string()) c.hidden_act = v["hidden_act"].get<std::string>();
  if (v.contains("rope_parameters") && v["rope_parameters"].is_object() &&
      v["rope_parameters"].contains("rope_theta"))
    c.rope_theta = v["rope_parameters"]["rope_theta"].get<double>();
  check(c.hidden_act == "gelu_pytorch_tanh",
        path + ": vision_config.hidden_act `" + c.hidden_act + "` is not supported (gelu_pytorch_tanh)");
  check(c.heads > 0 && c.hidden % c.heads == 0 && c.head_dim() % 4 == 0,
        path + ": vision_config hidden_size / num_heads must be a multiple of 4 (2-D rotary halves)");
  const int64_t side = int64_t(std::sqrt(double(c.num_position_embeddings)));
  check(side * side == c.num_position_embeddings, path + ": vision_config.num_position_embeddings must be a square");
  return c;
}

VisionWeights vision_weights_load(const CheckpointReader& ckpt, const VisionConfig& cfg) {
  const std::string prefix = ckpt.has("model.visual.patch_embed.proj.weight") ? "model.visual." : "visual.";
  VisionWeights w;
  w.cfg = cfg;
  const int64_t H = cfg.hidden, M = cfg.merge_size * cfg.merge_size * H;
  w.patch_embed = load_linear(ckpt, prefix + "patch_embed.proj", H, cfg.patch_features());
  w.pos_embed = load_f32(ckpt, prefix + "pos_embed.weight", cfg.num_position_embeddings * H,
                         std::to_string(cfg.num_position_embeddings) + "x" + std::to_string(H));
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = prefix + "blocks." + std::to_string(i) + ".";
    VisionBlockWeights b;
    b.norm1 = load_norm(ckpt, p + "norm1", H);
    b.norm2 = load_norm(ckpt, p + "norm2", H);
    b.qkv = load_linear(ckpt, p + "attn.qkv", 3 * H, H);
    b.proj = load_linear(ckpt, p + "attn.proj", H, H);
    b.fc1 = load_linear(ckpt, p + "mlp.linear_fc1", cfg.intermediate, H);
    b.fc2 = load_linear(ckpt, p + "mlp.linear_fc2", H, cfg.intermediate);
    w.blocks.push_back(std::move(b));
  }
  w.merger_norm = load_norm(ckpt, prefix + "merger.norm", H);
  w.merger_fc1 = load_linear(ckpt, prefix + "merger.linear_fc1", M, M);
  w.merger_fc2 = load_linear(ckpt, prefix + "merger.linear_fc2", cfg.out_hidden, M);
  return w;
}

int64_t vision_patch_count(const std::vector<std::array<int64_t, 3>>& grids) {
  int64_t n = 0;
  for (const auto& g : grids) n += g[0] * g[1] * g[2];
  return n;
}

std::vector<int32_t> vision_patch_positions(const std::vector<std::array<int64_t, 3>>& grids, int64_t merge) {
  const int64_t N = vision_patch_count(grids);
  std::vector<int32_t> rc(size_t(2 * N));
  int64_t n = 0;
  for (const auto& g : grids)
    for (int64_t t = 0; t < g[0]; ++t)
      for (int64_t within = 0; within < g[1] * g[2]; ++within, ++n) {
        const auto [row, col] = patch_row_col(within, g[2], merge);
        rc[size_t(n)] = int32_t(row);
        rc[size_t(N + n)] = int32_t(col);
      }
  return rc;
}

std::vector<float> vision_position_embeds(const VisionWeights& w, const std::vector<std::array<int64_t, 3>>& grids) {
  const VisionConfig& c = w.cfg;
  const int64_t H = c.hidden, side = int64_t(std::sqrt(double(c.num_position_embeddings)));
  std::vector<float> out(size_t(vision_patch_count(grids) * H));
  int64_t n = 0;
  for (const auto& g : grids)
    for (int64_t t = 0; t < g[0]; ++t)
      for (int64_t within = 0; within < g[1] * g[2]; ++within, ++n) {
        const auto [row, col] = patch_row_col(within, g[2], c.merge_size);
        int64_t ht[2], wt[2];
        float hw[2], ww[2];
        axis_taps(row, g[1], side, ht, hw);
        axis_taps(col, g[2], side, wt, ww);
        for (int64_t d = 0; d < H; ++d) {
          float s = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) s += w.pos_embed[size_t((ht[a] * side + wt[b]) * H + d)] * (hw[a] * ww[b]);
          out[size_t(n * H + d)] = s;
        }
      }
  return out;
}

std::vector<int32_t> vision_frame_bounds(const std::vector<std::array<int64_t, 3>>& grids) {
  std::vector<int32_t> cu{0};
  for (const auto& g : grids)
    for (int64_t t = 0; t < g[0]; ++t) cu.push_back(cu.back() + int32_t(g[1] * g[2]));
  return cu;
}

VisionOutput vision_forward(const VisionWeights& w, const std::vector<float>& pixel_values,
                            const std::vector<std::array<int64_t, 3>>& grids) {
  const VisionConfig& c = w.cfg;
  const int64_t H = c.hidden, nh = c.heads, hd = c.head_dim(), merge = c.merge_size;
  int64_t N = 0;
  for (const auto& g : grids) {
    check(g[1] % merge == 0 && g[2] % merge == 0, "vision_forward: grid not a multiple of the merge size");
    N += g[0] * g[1] * g[2];
  }
  check(int64_t(pixel_values.size()) == N * c.patch_features(),
        "vision_forward: pixel_values has " + std::to_string(pixel_values.size()) + " values, grids need " +
            std::to_string(N * c.patch_features()));

  // Patch embedding plus the interpolated learned position table; rotary angles from (row, col).
  std::vector<float> x(size_t(N * H));
  linear(w.patch_embed, pixel_values.data(), N, x.data());
  const std::vector<float> pos = vision_position_embeds(w, grids);
  for (size_t i = 0; i < x.size(); ++i) x[i] += pos[i];
  const std::vector<int32_t> rc = vision_patch_positions(grids, merge);
  const int64_t nfreq = hd / 4;  // per axis: inv_freq over spatial_dim = hd / 2 in steps of 2
  std::vector<float> inv_freq(static_cast<size_t>(nfreq));
  for (int64_t j = 0; j < nfreq; ++j)
    inv_freq[size_t(j)] = float(1.0 / std::pow(c.rope_theta, double(float(2 * j) / float(hd / 2))));
  std::vector<float> cos_t(size_t(N * hd)), sin_t(size_t(N * hd));
  for (int64_t n = 0; n < N; ++n) {
    const int32_t row = rc[size_t(n)], col = rc[size_t(N + n)];
    for (int64_t j = 0; j < nfreq; ++j) {
      const float fh = float(row) * inv_freq[size_t(j)], fw = float(col) * inv_freq[size_t(j)];
      for (int64_t rep = 0; rep < 2; ++rep) {
        cos_t[size_t(n * hd + rep * hd / 2 + j)] = std::cos(fh);
        sin_t[size_t(n * hd + rep * hd / 2 + j)] = std::sin(fh);
        cos_t[size_t(n * hd + rep * hd / 2 + nfreq + j)] = std::cos(fw);
        sin_t[size_t(n * hd + rep * hd / 2 + nfreq + j)] = std::sin(fw);
      }
    }
  }
  const std::vector<int32_t> segment_start = vision_frame_bounds(grids);  // attention runs within each frame

  std::vector<float> a(size_t(N * H)), qkv(size_t(N * 3 * H)), att(size_t(N * H)), proj(size_t(N * H));
  std::vector<float> mid(size_t(N * c.intermediate));
  std::vector<double> scores;
  const double scale = 1.0 / std::sqrt(double(hd));
  for (const VisionBlockWeights& b : w.blocks) {
    layer_norm(b.norm1, x.data(), N, H, a.data());
    linear(b.qkv, a.data(), N, qkv.data());
    // qkv row: [3][heads][hd]; rotate q and k (rotate_half over the whole head).
    for (int64_t i = 0; i < N; ++i)
      for (int64_t which = 0; which < 2; ++which)
        for (int64_t h = 0; h < nh; ++h) {
          float* v = qkv.data() + i * 3 * H + which * H + h * hd;
          const float* cs = cos_t.data() + i * hd;
          const float* sn = sin_t.data() + i * hd;
          std::vector<float> r(v, v + hd);
          for (int64_t d = 0; d < hd; ++d) {
            const float rot = d < hd / 2 ? -r[size_t(d + hd / 2)] : r[size_t(d - hd / 2)];
            v[d] = r[size_t(d)] * cs[d] + rot * sn[d];
          }
        }
    for (size_t s = 0; s + 1 < segment_start.size(); ++s) {
      const int64_t s0 = segment_start[s], s1 = segment_start[s + 1];
      scores.resize(size_t(s1 - s0));
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t i = s0; i < s1; ++i) {
          const float* q = qkv.data() + i * 3 * H + h * hd;
          double mx = -INFINITY;
          for (int64_t j = s0; j < s1; ++j) {
            const float* k = qkv.data() + j * 3 * H + H + h * hd;
            double d = 0;
            for (int64_t e = 0; e < hd; ++e) d += double(q[e]) * k[e];
            scores[size_t(j - s0)] = d * scale;
            mx = std::max(mx, d * scale);
          }
          double sum = 0;
          for (auto& sc : scores) sum += (sc = std::exp(sc - mx));
          for (int64_t e = 0; e < hd; ++e) {
            double o = 0;
            for (int64_t j = s0; j < s1; ++j) o += scores[size_t(j - s0)] * qkv[size_t(j * 3 * H + 2 * H + h * hd + e)];
            att[size_t(i * H + h * hd + e)] = float(o / sum);
          }
        }
    }
    linear(b.proj, att.data(), N, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    layer_norm(b.norm2, x.data(), N, H, a.data());
    linear(b.fc1, a.data(), N, mid.data());
    for (float& v : mid) v = gelu_tanh(v);
    linear(b.fc2, mid.data(), N, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }

  VisionOutput out;
  out.hidden = x;
  const int64_t tokens = N / (merge * merge), M = merge * merge * H;
  layer_norm(w.merger_norm, x.data(), N, H, a.data());  // (N, H) viewed as (tokens, M)
  std::vector<float> m1(size_t(tokens * M));
  linear(w.merger_fc1, a.data(), tokens, m1.data());
  for (float& v : m1) v = gelu_erf(v);
  out.embeds.resize(size_t(tokens * c.out_hidden));
  linear(w.merger_fc2, m1.data(), tokens, out.embeds.data());
  return out;
}

}  // namespace deltatune
