// The fixed value tables of bitsandbytes' 4-bit and 8-bit blockwise formats.
#pragma once
#include <array>

namespace deltatune {

// NF4 (bitsandbytes functional.get_4bit_type("nf4")): index 0..15, ascending, 7 is 0.0.
const std::array<float, 16>& nf4_codebook();
// bitsandbytes functional.create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): 256 ascending
// values in [-1, 1] (the code of the double-quantized NF4 absmax).
const std::array<float, 256>& dynamic_map_signed();
// Index of the table value nearest to x (ties to the lower index).
int nearest_index(const float* table, int n, float x);

}  // namespace deltatune
