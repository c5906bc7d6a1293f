// HTML for a rendered, tokenized example: every token a box (so boundaries are visible), trained
// tokens (labels != -100) highlighted, whitespace and newlines made visible.
#pragma once
#include <QString>

#include "deltatune/data_preview.h"

namespace studio {

QString tokensToHtml(const deltatune::PreviewExample& ex);

}  // namespace studio
