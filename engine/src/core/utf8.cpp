#include "core/utf8.h"

namespace deltatune {

int utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  if (i >= s.size()) return -1;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  uint32_t c, min;
  if ((b0 & 0xE0) == 0xC0)
    len = 2, c = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0)
    len = 3, c = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0)
    len = 4, c = b0 & 0x07, min = 0x10000;
  else
    return -1;
  if (i + static_cast<size_t>(len) > s.size()) return -1;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) return -1;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
  *cp = c;
  return len;
}

int utf8_decode_before(std::string_view s, size_t end, uint32_t* cp) {
  if (end == 0 || end > s.size()) return -1;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const int len = utf8_decode(s, start, cp);
  return (len > 0 && start + static_cast<size_t>(len) == end) ? len : -1;
}

size_t utf8_find_invalid(std::string_view s) {
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = utf8_decode(s, i, &cp);
    if (n < 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

void utf8_append(std::string* out, uint32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_make_valid(std::string_view s) {
  if (utf8_find_invalid(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    const int n = utf8_decode(s, i, &cp);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
      continue;
    }
    // Like from_utf8_lossy: one U+FFFD per maximal invalid prefix (a lead byte and the continuation
    // bytes that could still have belonged to it), or per stray byte.
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t need = (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 1;
    size_t j = i + 1;
    if (need > 1) {
      while (j < s.size() && j < i + need && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) {
        // Reject continuation bytes that make the prefix impossible (overlong/surrogate/too large).
        if (j == i + 1) {
          const auto b1 = static_cast<unsigned char>(s[j]);
          if ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F) || (b0 == 0xF0 && b1 < 0x90) ||
              (b0 == 0xF4 && b1 > 0x8F) || b0 < 0xC2 || b0 > 0xF4)
            break;
        }
        ++j;
      }
    }
    utf8_append(&out, 0xFFFD);
    i = j;
  }
  return out;
}

bool utf8_is_python_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace deltatune
