#include "vision/image_embeds.h"

#include <algorithm>

#include "core/error.h"

namespace deltatune {

std::vector<int32_t> image_token_rows(const VisionConfig& cfg, const std::vector<int32_t>& input_ids,
                                      const std::vector<float>& pixel_values,
                                      const std::vector<std::array<int64_t, 3>>& grids, int64_t hidden) {
  check(cfg.out_hidden == hidden, "vision tower: out_hidden_size " + std::to_string(cfg.out_hidden) +
                                      " differs from the text model's hidden_size " + std::to_string(hidden));
  std::vector<int32_t> rows;
  for (size_t t = 0; t < input_ids.size(); ++t)
    if (input_ids[t] == cfg.image_token_id) rows.push_back(static_cast<int32_t>(t));
  int64_t merged = 0, patches = 0;
  for (const auto& g : grids) {
    patches += g[0] * g[1] * g[2];
    merged += g[0] * g[1] * g[2] / (cfg.merge_size * cfg.merge_size);
  }
  check(int64_t(rows.size()) == merged, "images: " + std::to_string(rows.size()) + " image tokens but its " +
                                            std::to_string(grids.size()) + " images give " +
                                            std::to_string(merged) + " merged tokens");
  check(int64_t(pixel_values.size()) == patches * cfg.patch_features(),
        "images: pixel_values hold " + std::to_string(pixel_values.size()) + " values, its image grids need " +
            std::to_string(patches * cfg.patch_features()));
  return rows;
}

void image_embeds_insert(Backend& be, const std::vector<int32_t>& rows, const Tensor& embeds, Tensor& x) {
  if (rows.empty()) return;
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t H = x.cols();
  check(embeds.rows() == n && embeds.cols() == H, "images: the tower gave " + shape_str(embeds.shape) + " for " +
                                                      std::to_string(n) + " image tokens of width " +
                                                      std::to_string(H));
  Tensor e = embeds;
  if (e.dtype != x.dtype) {
    e = be.alloc({n, H}, x.dtype);
    be.copy(e, embeds);
  }
  const Tensor r = be.upload_i32(rows);
  // x[rows] (=) embeds with row ops every backend has: subtract the rows' token embeddings (exactly 0 left),
  // then add the merged tokens.
  Tensor old = be.alloc({n, H}, x.dtype);
  be.gather_rows(x, r, old);
  Tensor minus_one = host_tensor({n}, DType::F32);
  std::fill(minus_one.ptr<float>(), minus_one.ptr<float>() + n, -1.f);
  be.scatter_add_rows(old, r, be.upload(minus_one, DType::F32), x);
  be.scatter_add_rows(e, r, Tensor{}, x);
}

Tensor image_embeds_grad(Backend& be, const std::vector<int32_t>& rows, const Tensor& dx) {
  Tensor d = be.alloc({static_cast<int64_t>(rows.size()), dx.cols()}, dx.dtype);
  if (!rows.empty()) be.gather_rows(dx, be.upload_i32(rows), d);
  return d;
}

}  // namespace deltatune
