// Small UTF-8 helpers shared by the tokenizer, the template engine and the dataset readers.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace deltatune {

// Decodes the code point starting at s[i]; returns its byte length, or -1 if the bytes there are not
// valid UTF-8 (overlong forms, surrogates and values above U+10FFFF are invalid).
int utf8_decode(std::string_view s, size_t i, uint32_t* cp);
// Decodes the code point that ends just before s[end]; returns its length or -1.
int utf8_decode_before(std::string_view s, size_t end, uint32_t* cp);
// Byte offset of the first invalid sequence, or npos when s is valid UTF-8.
size_t utf8_find_invalid(std::string_view s);
// s with every invalid sequence replaced by U+FFFD (like Rust's from_utf8_lossy).
std::string utf8_make_valid(std::string_view s);
void utf8_append(std::string* out, uint32_t cp);
// Python str.isspace() for one code point (also what Python's re \s matches).
bool utf8_is_python_space(uint32_t cp);
// Number of code points (s must be valid UTF-8).
size_t utf8_length(std::string_view s);

}  // namespace deltatune
