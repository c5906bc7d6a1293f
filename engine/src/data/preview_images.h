// The Data page's view of one image of a chat row: what the trainer makes of it (decoded size, patch grid,
// merged tokens) and a small thumbnail, or the error that makes the row unusable.
#pragma once
#include <string>

#include "data/image_rows.h"
#include "deltatune/data_preview.h"

namespace deltatune {

// Never throws for a bad image: PreviewImage::error then says why ("<source>: image <path>: ...").
PreviewImage preview_image(const std::string& path, const VisionDataConfig* vision, const std::string& source);

}  // namespace deltatune
