// Jinja lexer with the whitespace rules HF uses: trim_blocks (one "\n" after a block/comment tag is
// dropped), lstrip_blocks (spaces before a block/comment tag at line start are dropped), "-" / "+"
// modifiers, and Jinja's source preparation (newlines normalized, one trailing newline removed).
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "data/jinja/ast.h"
#include "core/utf8.h"

namespace deltatune::jinja {
namespace {

bool py_space(uint32_t c) {
  return utf8_is_python_space(c);
}

size_t skip_space(const std::string& s, size_t i) {
  uint32_t cp;
  while (i < s.size()) {
    const int n = utf8_decode(s, i, &cp);
    if (n <= 0 || !py_space(cp)) break;
    i += static_cast<size_t>(n);
  }
  return i;
}

std::string rstrip_space(const std::string& s) {
  size_t end = s.size();
  uint32_t cp;
  while (end > 0) {
    const int n = utf8_decode_before(s, end, &cp);
    if (n <= 0 || !py_space(cp)) break;
    end -= static_cast<size_t>(n);
  }
  return s.substr(0, end);
}

bool all_space(const std::string& s, size_t from) {
  return skip_space(s, from) == s.size();
}

// jinja2 3.x (newline_re = \r\n|\r|\n, as transformers requires jinja2 >= 3.1): each of those line breaks
// becomes
// "\n" and one final line break is dropped. Other characters str.splitlines() breaks at (\x0b, \x0c,
// \x1c-\x1e, U+0085, U+2028, U+2029) stay as they are.
std::string prepare_source(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_hex_escape(const std::string& body, size_t* i, int digits, std::string* out,
                       const std::string& where) {
  check(*i + static_cast<size_t>(digits) <= body.size(),
        where + ": truncated \\x/\\u escape in string literal");
  for (int k = 0; k < digits; ++k)
    check(std::isxdigit(static_cast<unsigned char>(body[*i + static_cast<size_t>(k)])) != 0,
          where + ": malformed \\x/\\u escape in string literal");
  const uint32_t cp =
      static_cast<uint32_t>(std::stoul(body.substr(*i, static_cast<size_t>(digits)), nullptr, 16));
  utf8_append(out, cp);
  *i += static_cast<size_t>(digits);
}

// Python "unicode-escape" decoding of a string literal body.
std::string unescape(const std::string& body, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        ++i, append_hex_escape(body, &i, 2, &out, where), --i;
        break;
      case 'u':
        ++i, append_hex_escape(body, &i, 4, &out, where), --i;
        break;
      case 'U':
        ++i, append_hex_escape(body, &i, 8, &out, where), --i;
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = 0;
          int k = 0;
          while (k < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7')
            v = v * 8 + static_cast<uint32_t>(body[i++] - '0'), ++k;
          --i;
          utf8_append(&out, v);
        } else {  // unknown escapes stay as written
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                            ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|"};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& name) {
  const std::string src = prepare_source(source);
  std::vector<Token> out;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t i = from; i < to && i < src.size(); ++i)
      if (src[i] == '\n') ++line;
  };
  auto where = [&](int l) { return name + " line " + std::to_string(l); };
  auto emit_data = [&](std::string text, int l) {
    if (!text.empty()) out.push_back({Token::kData, std::move(text), l});
  };

  while (pos <= src.size()) {
    size_t k = pos;
    while (true) {
      k = src.find('{', k);
      if (k == std::string::npos || k + 1 >= src.size()) {
        k = std::string::npos;
        break;
      }
      const char c = src[k + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++k;
    }
    const int data_line = line;
    std::string text = src.substr(pos, k == std::string::npos ? std::string::npos : k - pos);
    if (k == std::string::npos) {
      emit_data(text, data_line);
      break;
    }
    count_lines(pos, k);
    const char kind = src[k + 1];
    const char sign = (k + 2 < src.size() && (src[k + 2] == '-' || src[k + 2] == '+')) ? src[k + 2] : 0;
    if (sign == '-') {
      text = rstrip_space(text);
    } else if (sign != '+' && kind != '{') {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos)) text.resize(l_pos);
    }
    emit_data(std::move(text), data_line);
    size_t p = k + 2 + (sign ? 1 : 0);
    const int tag_line = line;

    if (kind == '#') {
      const size_t end = src.find("#}", p);
      check(end != std::string::npos, where(tag_line) + ": unclosed comment {#");
      count_lines(p, end + 2);
      size_t after = end + 2;
      const char esign = end > p && (src[end - 1] == '-' || src[end - 1] == '+') ? src[end - 1] : 0;
      if (esign == '-')
        after = skip_space(src, after);
      else if (esign != '+' && after < src.size() && src[after] == '\n')
        ++after;
      line_starting = after > end + 2 && src[after - 1] == '\n';
      count_lines(end + 2, after);
      pos = after;
      continue;
    }

    // {% raw %} ... {% endraw %}
    if (kind == '%') {
      size_t q = skip_space(src, p);
      if (src.compare(q, 3, "raw") == 0) {
        size_t r = skip_space(src, q + 3);
        const bool dash = r < src.size() && src[r] == '-';
        if (src.compare(r + (dash ? 1 : 0), 2, "%}") == 0) {
          size_t body_start = r + (dash ? 1 : 0) + 2;
          if (dash) body_start = skip_space(src, body_start);
          size_t search = body_start;
          while (true) {
            const size_t e = src.find("{%", search);
            check(e != std::string::npos, where(tag_line) + ": {% raw %} without {% endraw %}");
            const char esign =
                e + 2 < src.size() && (src[e + 2] == '-' || src[e + 2] == '+') ? src[e + 2] : 0;
            size_t w = skip_space(src, e + 2 + (esign ? 1 : 0));
            if (src.compare(w, 6, "endraw") != 0) {
              search = e + 2;
              continue;
            }
            w = skip_space(src, w + 6);
            const char csign = w < src.size() && (src[w] == '-' || src[w] == '+') ? src[w] : 0;
            check(src.compare(w + (csign ? 1 : 0), 2, "%}") == 0,
                  where(tag_line) + ": malformed {% endraw %}");
            std::string raw = src.substr(body_start, e - body_start);
            if (esign == '-') raw = rstrip_space(raw);
            emit_data(std::move(raw), tag_line);
            size_t after = w + (csign ? 1 : 0) + 2;
            if (csign == '-')
              after = skip_space(src, after);
            else if (csign != '+' && after < src.size() && src[after] == '\n')
              ++after;
            line_starting = src[after - 1] == '\n';
            count_lines(p, after);
            pos = after;
            break;
          }
          continue;
        }
      }
    }

    const bool is_block = kind == '%';
    out.push_back({is_block ? Token::kBlockBegin : Token::kVarBegin, "", tag_line});
    int depth = 0;
    bool closed = false;
    while (p < src.size()) {
      const char c = src[p];
      if (c == '\n') {
        ++line, ++p;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++p;
        continue;
      }
      if (depth == 0) {
        const char* close = is_block ? "%}" : "}}";
        const char esign = (c == '-' || c == '+') ? c : 0;
        if (src.compare(p + (esign ? 1 : 0), 2, close) == 0 && (esign != '+' || is_block)) {
          const size_t close_end = p + (esign ? 1 : 0) + 2;
          size_t after = close_end;
          if (esign == '-')
            after = skip_space(src, after);
          else if (is_block && esign != '+' && after < src.size() && src[after] == '\n')
            ++after;
          count_lines(p, after);
          line_starting = after > close_end && src[after - 1] == '\n';
          out.push_back({is_block ? Token::kBlockEnd : Token::kVarEnd, "", line});
          pos = after;
          closed = true;
          break;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p + 1;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        out.push_back({Token::kName, src.substr(p, e - p), line});
        p = e;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = p;
        bool is_float = false;
        while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        }
        if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
          size_t f = e + 1;
          if (f < src.size() && (src[f] == '+' || src[f] == '-')) ++f;
          if (f < src.size() && std::isdigit(static_cast<unsigned char>(src[f]))) {
            is_float = true;
            e = f;
            while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
          }
        }
        std::string num;
        for (size_t i = p; i < e; ++i)
          if (src[i] != '_') num.push_back(src[i]);
        out.push_back({is_float ? Token::kFloat : Token::kInt, num, line});
        p = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < src.size() && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        check(e < src.size(), where(line) + ": unterminated string literal");
        const int l = line;
        count_lines(p, e);
        out.push_back({Token::kString, unescape(src.substr(p + 1, e - p - 1), where(l)), l});
        p = e + 1;
        continue;
      }
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (src.compare(p, n, op) == 0) {
          if (*op == '(' || *op == '[' || *op == '{') ++depth;
          if (*op == ')' || *op == ']' || *op == '}') --depth;
          out.push_back({Token::kOp, op, line});
          p += n;
          matched = true;
          break;
        }
      }
      if (!matched) throw Error(where(line) + ": unexpected character '" + std::string(1, c) + "' in a tag");
    }
    check(closed, where(tag_line) + ": tag opened here is never closed");
  }
  out.push_back({Token::kEof, "", line});
  return out;
}

}  // namespace deltatune::jinja
