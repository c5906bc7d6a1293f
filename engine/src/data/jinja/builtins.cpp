#include "data/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "core/utf8.h"

namespace deltatune::jinja {
namespace {

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    int n = utf8_decode(s, i, &cp);
    if (n <= 0) n = 1;
    out.push_back(s.substr(i, static_cast<size_t>(n)));
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string map_case(const std::string& s, int mode /*0 lower 1 upper*/) {
  std::string out;
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    int n = utf8_decode(s, i, &cp);
    if (n <= 0) {
      out.push_back(s[i++]);
      continue;
    }
    const auto c = static_cast<utf8proc_int32_t>(cp);
    utf8_append(&out, static_cast<uint32_t>(mode ? utf8proc_toupper(c) : utf8proc_tolower(c)));
    i += static_cast<size_t>(n);
  }
  return out;
}

// Calls f(cp) for each code point of s; a byte that starts no valid sequence counts as one code point: its own
// value (kByteValue) or U+FFFD (kReplacement).
enum class BadByte { kByteValue, kReplacement };
template <class F>
void for_each_code_point(const std::string& s, BadByte bad, F&& f) {
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    int n = utf8_decode(s, i, &cp);
    if (n <= 0) n = 1, cp = bad == BadByte::kByteValue ? static_cast<unsigned char>(s[i]) : 0xFFFDu;
    f(cp);
    i += static_cast<size_t>(n);
  }
}

bool is_cased_letter(uint32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

std::string title_case(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for_each_code_point(s, BadByte::kByteValue, [&](uint32_t cp) {
    const auto c = static_cast<utf8proc_int32_t>(cp);
    utf8_append(&out, static_cast<uint32_t>(prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c)));
    prev_cased = is_cased_letter(cp);
  });
  return out;
}

// jinja2's |title (unlike str.title()): words start after '-', whitespace, '(', '{', '[' or '<'; each word is
// its first character upper-cased and the rest lower-cased ("o'neil" -> "O'neil", "{'k': 1}" unchanged).
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for_each_code_point(s, BadByte::kByteValue, [&](uint32_t cp) {
    const bool sep =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || utf8_is_python_space(cp);
    const auto c = static_cast<utf8proc_int32_t>(cp);
    utf8_append(&out, static_cast<uint32_t>(sep          ? c
                                            : word_start ? utf8proc_toupper(c)
                                                         : utf8proc_tolower(c)));
    word_start = sep;
  });
  return out;
}

// Python str.islower() / str.isupper(): some cased character and none of the other case.
bool py_is_case(const std::string& s, bool upper) {
  bool any_cased = false, other_case = false;
  for_each_code_point(s, BadByte::kReplacement, [&](uint32_t cp) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (upper ? (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT)
              : (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT))
      other_case = true;
    if (cat == (upper ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL)) any_cased = true;
  });
  return any_cased && !other_case;
}

// jinja2's |wordcount: the number of matches of Python's re `\w+` (alphanumeric or '_').
int64_t count_py_words(const std::string& s) {
  int64_t words = 0;
  bool in_word = false;
  for_each_code_point(s, BadByte::kReplacement, [&](uint32_t cp) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    const bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                   (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    if (w && !in_word) ++words;
    in_word = w;
  });
  return words;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  uint32_t cp;
  int n = utf8_decode(s, 0, &cp);
  if (n <= 0) return s;
  std::string out;
  utf8_append(&out, static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))));
  return out + map_case(s.substr(static_cast<size_t>(n)), 0);
}

[[noreturn]] void type_error(const std::string& what) {
  throw Error(what);
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (v.is_undefined())
    throw Error(v.undefined_hint().empty() ? what + " of an undefined value" : v.undefined_hint());
  if (!v.is_string()) type_error(what + " expects a string, got " + v.type_name());
  return v.str();
}

Value arg(std::vector<Value>& args, KwArgs& kw, size_t pos, const char* name, Value fallback = Value()) {
  if (pos < args.size()) return args[pos];
  for (auto& [k, v] : kw)
    if (k == name) return v;
  return fallback;
}

List split_ws(const std::string& s, int64_t maxsplit) {
  List out;
  size_t i = 0;
  uint32_t cp;
  auto is_sp = [&](size_t at, int* len) {
    *len = utf8_decode(s, at, &cp);
    if (*len <= 0) *len = 1;
    return *len > 0 && utf8_is_python_space(cp);
  };
  int len;
  while (i < s.size()) {
    while (i < s.size() && is_sp(i, &len)) i += static_cast<size_t>(len);
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // Python keeps the rest (with its trailing spaces stripped only by rstrip semantics of split)
      std::string rest = s.substr(i);
      out.push_back(Value(py_strip(rest, Value::none(), false, true)));
      return out;
    }
    size_t j = i;
    while (j < s.size() && !is_sp(j, &len)) j += static_cast<size_t>(len);
    out.push_back(Value(s.substr(i, j - i)));
    i = j;
  }
  return out;
}

List split_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) throw Error("split(): empty separator");
  List out;
  size_t i = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t k = s.find(sep, i);
    if (k == std::string::npos) break;
    out.push_back(Value(s.substr(i, k - i)));
    i = k + sep.size();
  }
  out.push_back(Value(s.substr(i)));
  return out;
}

List rsplit_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split_sep(s, sep, -1);
  if (sep.empty()) throw Error("rsplit(): empty separator");
  List rev;
  size_t end = s.size();
  while (static_cast<int64_t>(rev.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t k = s.rfind(sep, end - sep.size());
    if (k == std::string::npos) break;
    rev.push_back(Value(s.substr(k + sep.size(), end - k - sep.size())));
    end = k;
  }
  rev.push_back(Value(s.substr(0, end)));
  std::reverse(rev.begin(), rev.end());
  return rev;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` between characters
    std::string out;
    int64_t n = 0;
    for (const auto& c : code_points(s)) {
      if (count < 0 || n < count) out += to, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t i = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t k = s.find(from, i);
    if (k == std::string::npos) break;
    out.append(s, i, k - i);
    out += to;
    i = k + from.size();
    ++n;
  }
  out.append(s, i, std::string::npos);
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_list()) {
    for (const auto& v : what.items())
      if (one(need_str(v, start ? "startswith" : "endswith"))) return true;
    return false;
  }
  return one(need_str(what, start ? "startswith" : "endswith"));
}

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// A string result of a Markup receiver's method or of a filter that keeps Markup (soft_str in Jinja).
Value same_markup(const Value& like, Value r) {
  if (!like.is_markup()) return r;
  if (r.is_string()) return Value::markup(r.str());
  if (r.is_list()) {
    List l;
    for (const auto& x : r.items()) l.push_back(x.is_string() ? Value::markup(x.str()) : x);
    return Value::list(std::move(l), r.is_tuple());
  }
  return r;
}

Value bound(const Value& self, const std::string& name) {
  if (self.is_string()) {
    static const char* const kStr[] = {
        "startswith", "endswith", "strip",   "lstrip",     "rstrip",  "split",   "rsplit",     "replace",
        "upper",      "lower",    "title",   "capitalize", "find",    "rfind",   "count",      "join",
        "isdigit",    "isalpha",  "isspace", "isalnum",    "isupper", "islower", "splitlines", "index"};
    if (std::find_if(std::begin(kStr), std::end(kStr), [&](const char* m) { return name == m; }) ==
        std::end(kStr))
      return Value::undefined("'str object' has no attribute '" + name + "'");
  } else if (self.is_dict()) {
    if (name != "items" && name != "keys" && name != "values" && name != "get") return Value::undefined();
  } else if (self.is_list()) {
    if (name != "index" && name != "count") return Value::undefined();
    if (name == "append" || name == "pop" || name == "insert" || name == "extend" || name == "remove")
      return Value::undefined();
  } else {
    return Value::undefined();
  }
  if (self.is_markup()) {  // Markup's methods return Markup (markupsafe wraps them)
    const Value inner = bound(Value(self.str()), name);
    return Value::function(
        [self, inner](std::vector<Value>& args, KwArgs& kw) -> Value {
          return same_markup(self, inner.fn()(args, kw));
        },
        name);
  }
  return Value::function(
      [self, name](std::vector<Value>& args, KwArgs& kw) -> Value {
        if (self.is_dict()) {
          const Dict& d = self.dict_ref();
          if (name == "items") {
            List out;
            for (const auto& [k, v] : d.items) out.push_back(Value::list({Value(k), v}, true));
            return Value::list(std::move(out));
          }
          if (name == "keys") {
            List out;
            for (const auto& kv : d.items) out.push_back(Value(kv.first));
            return Value::list(std::move(out));
          }
          if (name == "values") {
            List out;
            for (const auto& kv : d.items) out.push_back(kv.second);
            return Value::list(std::move(out));
          }
          // get
          const Value key = arg(args, kw, 0, "key");
          const Value fallback = arg(args, kw, 1, "default", Value::none());
          if (!key.is_string()) return fallback;
          const Value* v = d.find(key.str());
          return v ? *v : fallback;
        }
        if (self.is_list()) {
          const Value x = arg(args, kw, 0, "value");
          int64_t n = 0, first = -1;
          for (size_t i = 0; i < self.items().size(); ++i)
            if (values_equal(self.items()[i], x)) {
              if (first < 0) first = static_cast<int64_t>(i);
              ++n;
            }
          if (name == "count") return Value(n);
          if (first < 0) throw Error("list.index(x): x not in list");
          return Value(first);
        }
        const std::string& s = self.str();
        if (name == "startswith" || name == "endswith")
          return Value(starts_or_ends(s, arg(args, kw, 0, "prefix"), name == "startswith"));
        if (name == "strip") return Value(py_strip(s, arg(args, kw, 0, "chars", Value::none()), true, true));
        if (name == "lstrip")
          return Value(py_strip(s, arg(args, kw, 0, "chars", Value::none()), true, false));
        if (name == "rstrip")
          return Value(py_strip(s, arg(args, kw, 0, "chars", Value::none()), false, true));
        if (name == "split" || name == "rsplit") {
          const Value sep = arg(args, kw, 0, "sep", Value::none());
          const int64_t maxsplit = arg(args, kw, 1, "maxsplit", Value(int64_t{-1})).as_int();
          if (sep.is_none() || sep.is_undefined())
            return Value::list(split_ws(s, name == "split" ? maxsplit : -1));
          return Value::list(name == "split" ? split_sep(s, need_str(sep, "split"), maxsplit)
                                             : rsplit_sep(s, need_str(sep, "rsplit"), maxsplit));
        }
        if (name == "splitlines") {
          List out;
          std::string cur;
          for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\n' || s[i] == '\r') {
              out.push_back(Value(cur));
              cur.clear();
              if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
            } else {
              cur.push_back(s[i]);
            }
          }
          if (!cur.empty()) out.push_back(Value(cur));
          return Value::list(std::move(out));
        }
        if (name == "replace")
          return Value(replace_all(s, need_str(arg(args, kw, 0, "old"), "replace"),
                                   need_str(arg(args, kw, 1, "new"), "replace"),
                                   arg(args, kw, 2, "count", Value(int64_t{-1})).as_int()));
        if (name == "upper") return Value(map_case(s, 1));
        if (name == "lower") return Value(map_case(s, 0));
        if (name == "title") return Value(title_case(s));
        if (name == "capitalize") return Value(capitalize(s));
        if (name == "find" || name == "rfind" || name == "index") {
          const std::string& sub = need_str(arg(args, kw, 0, "sub"), name);
          const size_t k = name == "rfind" ? s.rfind(sub) : s.find(sub);
          if (k == std::string::npos) {
            if (name == "index") throw Error("str.index: substring not found");
            return Value(int64_t{-1});
          }
          return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, k))));
        }
        if (name == "count") {
          const std::string& sub = need_str(arg(args, kw, 0, "sub"), "count");
          if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
          int64_t n = 0;
          for (size_t k = s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
          return Value(n);
        }
        if (name == "join") {
          std::string out;
          bool first = true;
          for (const auto& v : iterate(arg(args, kw, 0, "iterable"))) {
            if (!first) out += s;
            out += need_str(v, "str.join");
            first = false;
          }
          return Value(out);
        }
        // is* predicates
        if (s.empty()) return Value(false);
        bool all = true, any_cased = false;
        size_t i = 0;
        uint32_t cp;
        while (i < s.size()) {
          int n = utf8_decode(s, i, &cp);
          if (n <= 0) n = 1, cp = 0xFFFD;
          const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
          const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
          const bool digit = cat == UTF8PROC_CATEGORY_ND;
          if (name == "isdigit")
            all = all && digit;
          else if (name == "isalpha")
            all = all && alpha;
          else if (name == "isalnum")
            all = all && (alpha || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO);
          else if (name == "isspace")
            all = all && utf8_is_python_space(cp);
          else if (name == "isupper") {
            if (cat == UTF8PROC_CATEGORY_LL) all = false;
            if (cat == UTF8PROC_CATEGORY_LU) any_cased = true;
          } else if (name == "islower") {
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) all = false;
            if (cat == UTF8PROC_CATEGORY_LL) any_cased = true;
          }
          i += static_cast<size_t>(n);
        }
        if (name == "isupper" || name == "islower") return Value(all && any_cased);
        return Value(all);
      },
      name);
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict_ref().items.size());
    default:
      throw Error("object of type '" + v.type_name() + "' has no len()");
  }
}

Value attribute_path(const Value& v, const Value& attr) {
  if (attr.is_int()) return get_item(v, attr);
  Value cur = v;
  const std::string path = attr.to_str();
  size_t i = 0;
  while (true) {
    const size_t dot = path.find('.', i);
    const std::string part = path.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) break;
    i = dot + 1;
  }
  return cur;
}

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    const std::string& c = need_str(chars, "strip");
    size_t i = 0;
    uint32_t cp;
    while (i < c.size()) {
      int n = utf8_decode(c, i, &cp);
      if (n <= 0) n = 1, cp = static_cast<unsigned char>(c[i]);
      set.push_back(cp);
      i += static_cast<size_t>(n);
    }
  }
  auto strip_cp = [&](uint32_t cp) {
    return ws ? utf8_is_python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = s.size();
  uint32_t cp;
  if (left)
    while (b < e) {
      const int n = utf8_decode(s, b, &cp);
      if (n <= 0 || !strip_cp(cp)) break;
      b += static_cast<size_t>(n);
    }
  if (right)
    while (e > b) {
      const int n = utf8_decode_before(s, e, &cp);
      if (n <= 0 || !strip_cp(cp)) break;
      e -= static_cast<size_t>(n);
    }
  return s.substr(b, e - b);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    throw Error(obj.undefined_hint().empty() ? "attribute '" + name + "' of an undefined value"
                                             : obj.undefined_hint());
  }
  if (obj.is_namespace()) {
    const Value* v = obj.dict_ref().find(name);
    return v ? *v : Value::undefined("'Namespace' has no attribute '" + name + "'");
  }
  if (obj.is_dict()) {
    Value m = bound(obj, name);
    if (!m.is_undefined()) return m;
    const Value* v = obj.dict_ref().find(name);
    return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  Value m = bound(obj, name);
  if (!m.is_undefined()) return m;
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined())
    throw Error(obj.undefined_hint().empty() ? "item of an undefined value" : obj.undefined_hint());
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict_ref().find(key.str())) return *v;
      if (!obj.is_namespace()) {
        Value m = bound(obj, key.str());
        if (!m.is_undefined()) return m;
      }
      return Value::undefined("'dict object' has no attribute '" + key.str() + "'");
    }
    return Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.is_string()) return get_attr(obj, key.str());
    if (!key.is_int() && !key.is_bool()) return Value::undefined("invalid index " + key.repr());
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(obj.type_name() + " object has no element " + key.repr());
      return obj.items()[static_cast<size_t>(i)];
    }
    const auto cps = code_points(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + key.repr());
    return Value(cps[static_cast<size_t>(i)]);
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) throw Error("cannot slice a value of type " + obj.type_name());
  std::vector<std::string> cps;
  int64_t n;
  if (is_str) {
    cps = code_points(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  auto given = [](const Value& v) { return !(v.is_undefined() || v.is_none()); };
  const int64_t step = given(step_v) ? step_v.as_int() : 1;
  if (step == 0) throw Error("slice step cannot be zero");
  // Python's slice.indices()
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t x = v.as_int();
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = clamp(start_v, step < 0 ? n - 1 : 0), stop = clamp(stop_v, step < 0 ? -1 : n);
  std::string s;
  List l;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_str)
      s += cps[static_cast<size_t>(i)];
    else
      l.push_back(obj.items()[static_cast<size_t>(i)]);
  }
  return is_str ? Value(s) : Value::list(std::move(l), obj.is_tuple());
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      List out;
      for (const auto& kv : v.dict_ref().items) out.push_back(Value(kv.first));
      return out;
    }
    case Value::Kind::kString: {
      List out;
      for (auto& c : code_points(v.str())) out.push_back(Value(c));
      return out;
    }
    default:
      throw Error("'" + v.type_name() + "' object is not iterable");
  }
}

// Jinja's select/reject/selectattr/rejectattr/map start with `if value:`: none, false or an empty value give
// an empty sequence instead of an error.
List iterate_truthy(const Value& v) {
  return v.truthy() ? iterate(v) : List{};
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string())
    return container.str().find(need_str(item, "'in <string>'")) != std::string::npos;
  if (container.is_dict()) return item.is_string() && container.dict_ref().find(item.str()) != nullptr;
  if (container.is_list()) {
    for (const auto& v : container.items())
      if (values_equal(v, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  throw Error("argument of type '" + container.type_name() + "' is not iterable");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  for (const Value* v : {&a, &b})
    if (v->is_undefined())
      throw Error(v->undefined_hint().empty() ? "undefined value in '" + op + "'" : v->undefined_hint());
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(a.as_int() + b.as_int());
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (!a.is_markup() && !b.is_markup()) return Value(a.str() + b.str());
      return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                           (b.is_markup() ? b.str() : html_escape(b.str())));
    }
    if (a.is_list() && b.is_list()) {
      List l = a.items();
      l.insert(l.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(l), a.is_tuple());
    }
    if (a.is_string() || b.is_string())
      throw Error("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
  } else if (op == "-") {
    if (ints) return Value(a.as_int() - b.as_int());
    if (nums) return Value(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) return Value(a.as_int() * b.as_int());
    if (nums) return Value(a.as_double() * b.as_double());
    const Value* seq = a.is_string() || a.is_list() ? &a : &b;
    const Value* cnt = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) && (cnt->is_int() || cnt->is_bool())) {
      const int64_t k = std::max<int64_t>(0, cnt->as_int());
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < k; ++i) out += seq->str();
        return Value(out);
      }
      List l;
      for (int64_t i = 0; i < k; ++i) l.insert(l.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(l));
    }
  } else if (op == "/") {
    if (nums) {
      if (b.as_double() == 0) throw Error("division by zero");
      return Value(a.as_double() / b.as_double());
    }
  } else if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw Error("integer division or modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // Python floors
      return Value(op == "//" ? q : r);
    }
    if (nums) {
      const double x = a.as_double(), y = b.as_double();
      if (y == 0) throw Error("float division or modulo by zero");
      const double q = std::floor(x / y);
      return Value(op == "//" ? q : x - q * y);
    }
    if (op == "%" && a.is_string())
      throw Error("unsupported template construct: printf-style '%' string formatting");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value(r);
    }
    if (nums) return Value(std::pow(a.as_double(), b.as_double()));
  }
  throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
              "'");
}

// ---------------------------------------------------------------------------------------------

namespace {

const char* const kFilters[] = {
    "length",     "count",     "tojson", "trim",    "first", "last",   "string",     "safe",   "default",
    "d",          "items",     "list",   "join",    "upper", "lower",  "capitalize", "title",  "replace",
    "int",        "float",     "abs",    "reverse", "sort",  "map",    "select",     "reject", "selectattr",
    "rejectattr", "unique",    "min",    "max",     "sum",   "indent", "dictsort",   "round",  "e",
    "escape",     "wordcount", "center", "batch",   "tojson"};
const char* const kTests[] = {
    "defined", "undefined", "none",     "string",   "number",   "integer", "float",  "boolean",     "true",
    "false",   "mapping",   "iterable", "sequence", "callable", "odd",     "even",   "divisibleby", "equalto",
    "eq",      "==",        "ne",       "!=",       "lt",       "<",       "le",     "<=",          "gt",
    ">",       "ge",        ">=",       "in",       "lower",    "upper",   "sameas", "escaped"};

}  // namespace

bool has_filter(const std::string& name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return name == f; });
}

bool has_test(const std::string& name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* f) { return name == f; });
}

bool apply_test(const std::string& name, const Value& v, std::vector<Value>& args) {
  auto a0 = [&]() -> const Value& {
    if (args.empty()) throw Error("test '" + name + "' needs an argument");
    return args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_function() || v.is_undefined();  // jinja2's Undefined has __call__
  if (name == "odd") return v.as_int() % 2 != 0;
  if (name == "even") return v.as_int() % 2 == 0;
  if (name == "divisibleby") return a0().as_int() != 0 && v.as_int() % a0().as_int() == 0;
  if (name == "equalto" || name == "eq" || name == "==") return values_equal(v, a0());
  if (name == "ne" || name == "!=") return !values_equal(v, a0());
  if (name == "sameas") {
    const Value& o = a0();
    if (v.is_none() || v.is_bool() || o.is_none() || o.is_bool())
      return v.kind() == o.kind() && values_equal(v, o);
    return values_equal(v, o) && v.kind() == o.kind();
  }
  if (name == "lt" || name == "<") return values_compare(v, a0()) < 0;
  if (name == "le" || name == "<=") return values_compare(v, a0()) <= 0;
  if (name == "gt" || name == ">") return values_compare(v, a0()) > 0;
  if (name == "ge" || name == ">=") return values_compare(v, a0()) >= 0;
  if (name == "in") return contains(a0(), v);
  if (name == "lower" || name == "upper") return py_is_case(v.to_str(), name == "upper");  // str(v).islower()
  if (name == "escaped") return false;
  throw Error("unsupported template construct: test '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, std::vector<Value>& args, KwArgs& kw) {
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "safe") return v.is_string() ? Value::markup(v.str()) : Value::markup(v.to_str());
  if (v.is_markup() && (name == "string" || name == "trim" || name == "upper" || name == "lower" ||
                        name == "capitalize" || name == "title"))  // soft_str keeps Markup
    return same_markup(v, apply_filter(name, Value(v.str()), args, kw));
  if (name == "string") return Value(v.to_str());
  if (name == "default" || name == "d") {
    const Value dflt = arg(args, kw, 0, "default_value", Value(""));
    const bool boolean = arg(args, kw, 1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
    return v;
  }
  if (name == "tojson") {
    JsonOptions o;
    const Value indent = arg(args, kw, 1, "indent", Value::none());
    if (indent.is_int())
      o.indent = static_cast<int>(indent.as_int());
    else if (indent.is_string())
      throw Error("tojson: string indent is not supported");
    const Value ensure_ascii = arg(args, kw, 0, "ensure_ascii", Value(false));
    o.ensure_ascii = ensure_ascii.truthy();
    const Value seps = arg(args, kw, 2, "separators", Value::none());
    if (seps.is_list() && seps.items().size() == 2) {
      o.item_sep = need_str(seps.items()[0], "tojson separators");
      o.key_sep = need_str(seps.items()[1], "tojson separators");
    }
    o.sort_keys = arg(args, kw, 3, "sort_keys", Value(false)).truthy();
    if (v.is_undefined()) throw Error("Object of type Undefined is not JSON serializable");
    return Value(to_json(v, o));
  }
  if (name == "trim") {
    if (v.is_undefined()) return Value("");
    return Value(py_strip(v.to_str(), arg(args, kw, 0, "chars", Value::none()), true, true));
  }
  if (name == "upper" || name == "lower") return Value(map_case(v.to_str(), name == "upper"));
  if (name == "capitalize") return Value(capitalize(v.to_str()));
  if (name == "title") return Value(jinja_title(v.to_str()));
  if (name == "replace")
    return Value(replace_all(
        v.to_str(), arg(args, kw, 0, "old").to_str(), arg(args, kw, 1, "new").to_str(),
        arg(args, kw, 2, "count", Value::none()).is_none() ? -1 : arg(args, kw, 2, "count").as_int()));
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) throw Error("items filter: expected a mapping, got " + v.type_name());
    List out;
    for (const auto& [k, x] : v.dict_ref().items) out.push_back(Value::list({Value(k), x}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw Error("dictsort filter: expected a mapping");
    auto items = v.dict_ref().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
      return map_case(a.first, 0) < map_case(b.first, 0);
    });
    List out;
    for (const auto& [k, x] : items) out.push_back(Value::list({Value(k), x}, true));
    return Value::list(std::move(out));
  }
  if (name == "join") {
    const std::string sep = arg(args, kw, 0, "d", Value("")).to_str();
    const Value attribute = arg(args, kw, 1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first) out += sep;
      out += (attribute.is_none() ? x : attribute_path(x, attribute)).to_str();
      first = false;
    }
    return Value(out);
  }
  if (name == "int") {
    const Value dflt = arg(args, kw, 0, "default", Value(int64_t{0}));
    if (v.is_number()) return Value(v.as_int());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = py_strip(v.str(), Value::none(), true, true);
        const int64_t x = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(x);
        return Value(static_cast<int64_t>(std::stod(s)));
      } catch (const std::exception&) {
        return dflt;
      }
    }
    return dflt;
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.str()));
      } catch (const std::exception&) {
      }
    }
    return arg(args, kw, 0, "default", Value(0.0));
  }
  if (name == "abs") {
    if (v.is_int() || v.is_bool()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    return Value(std::fabs(v.as_double()));
  }
  if (name == "round") {
    const int64_t precision = arg(args, kw, 0, "precision", Value(int64_t{0})).as_int();
    const std::string method = arg(args, kw, 1, "method", Value("common")).to_str();
    if ((v.is_int() || v.is_bool()) && method == "common" && precision >= 0)
      return Value(v.as_int());  // Python round(int, n) is the int
    const double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    x = method == "ceil"    ? std::ceil(x)
        : method == "floor" ? std::floor(x)
                            : std::nearbyint(x);  // half to even
    return Value(x / scale);
  }
  if (name == "reverse") {
    if (v.is_string()) return get_slice(v, Value::none(), Value::none(), Value(int64_t{-1}));
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    List items = iterate(v);
    const Value attribute = arg(args, kw, name == "sort" ? 2 : 1, "attribute", Value::none());
    const bool reverse = name == "sort" && arg(args, kw, 0, "reverse", Value(false)).truthy();
    auto key = [&](const Value& x) {
      Value k = attribute.is_none() ? x : attribute_path(x, attribute);
      return k.is_string() ? Value(map_case(k.str(), 0)) : k;  // case_sensitive=False by default
    };
    if (name == "unique") {
      List out;
      for (const auto& x : items)
        if (std::none_of(out.begin(), out.end(),
                         [&](const Value& y) { return values_equal(key(x), key(y)); }))
          out.push_back(x);
      return Value::list(std::move(out));
    }
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& a, const Value& b) { return values_compare(key(a), key(b)) < 0; });
    if (name == "min") return items.empty() ? Value::undefined("No min item") : items.front();
    if (name == "max") {
      if (items.empty()) return Value::undefined("No max item");
      // Python's max keeps the first of equal maxima
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i)
        if (values_compare(key(items[i]), key(items[best])) > 0) best = i;
      return items[best];
    }
    if (reverse) {
      std::stable_sort(items.begin(), items.end(),
                       [&](const Value& a, const Value& b) { return values_compare(key(a), key(b)) > 0; });
    }
    return Value::list(std::move(items));
  }
  if (name == "sum") {
    const Value attribute = arg(args, kw, 0, "attribute", Value::none());
    Value total = arg(args, kw, 1, "start", Value(int64_t{0}));
    for (const auto& x : iterate(v))
      total = binary_op("+", total, attribute.is_none() ? x : attribute_path(x, attribute));
    return total;
  }
  if (name == "map") {
    const Value attribute = arg(args, kw, 99, "attribute", Value::none());
    List out;
    if (!attribute.is_none()) {
      const Value dflt = arg(args, kw, 99, "default");
      for (const auto& x : iterate_truthy(v)) {
        Value r = attribute_path(x, attribute);
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
      return Value::list(std::move(out));
    }
    if (args.empty()) throw Error("map filter needs a filter name or attribute=");
    const std::string f = args[0].to_str();
    std::vector<Value> rest(args.begin() + 1, args.end());
    for (const auto& x : iterate_truthy(v)) {
      std::vector<Value> a = rest;
      KwArgs k;
      out.push_back(apply_filter(f, x, a, k));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool attr = name == "selectattr" || name == "rejectattr";
    const bool want = name == "select" || name == "selectattr";
    size_t k = 0;
    Value attribute;
    if (attr) {
      if (args.empty()) throw Error(name + " filter needs an attribute name");
      attribute = args[k++];
    }
    std::string test;
    if (k < args.size()) test = args[k++].to_str();
    std::vector<Value> targs(args.begin() + static_cast<std::ptrdiff_t>(std::min(k, args.size())),
                             args.end());
    List out;
    for (const auto& x : iterate_truthy(v)) {
      const Value subj = attr ? attribute_path(x, attribute) : x;
      const bool ok = test.empty() ? subj.truthy() : apply_test(test, subj, targs);
      if (ok == want) out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (name == "indent") {
    const Value width_v = arg(args, kw, 0, "width", Value(int64_t{4}));
    const std::string pad =
        width_v.is_string() ? width_v.str() : std::string(static_cast<size_t>(width_v.as_int()), ' ');
    const bool first = arg(args, kw, 1, "first", Value(false)).truthy();
    const bool blank = arg(args, kw, 2, "blank", Value(false)).truthy();
    const std::string s = v.to_str();
    std::string out;
    size_t i = 0;
    bool line_start = true, first_line = true;
    while (i <= s.size()) {
      const size_t nl = s.find('\n', i);
      const std::string line = s.substr(i, nl == std::string::npos ? std::string::npos : nl - i);
      if (!(first_line && !first) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      i = nl + 1;
      first_line = false;
      (void)line_start;
    }
    return Value(out);
  }
  if (name == "e" || name == "escape") return v.is_markup() ? v : Value::markup(html_escape(v.to_str()));
  if (name == "wordcount") return Value(count_py_words(v.to_str()));
  throw Error("unsupported template construct: filter '" + name + "'");
}

void add_globals(std::unordered_map<std::string, Value>* scope) {
  (*scope)["raise_exception"] = Value::function(
      [](std::vector<Value>& args, KwArgs&) -> Value {
        throw Error("raise_exception: " + (args.empty() ? std::string() : args[0].to_str()));
      },
      "raise_exception");
  (*scope)["namespace"] = Value::function(
      [](std::vector<Value>& args, KwArgs& kw) -> Value {
        Dict d;
        for (const auto& a : args)
          if (a.is_dict())
            for (const auto& [k, v] : a.dict_ref().items) d.set(k, v);
        for (const auto& [k, v] : kw) {
          if (!k.empty() && k[0] == '_')
            throw Error("namespace attributes cannot start with '_' (" + k + ")");
          d.set(k, v);
        }
        return Value::dict(std::move(d), true);
      },
      "namespace");
  (*scope)["dict"] = Value::function(
      [](std::vector<Value>& args, KwArgs& kw) -> Value {
        Dict d;
        for (const auto& a : args)
          if (a.is_dict())
            for (const auto& [k, v] : a.dict_ref().items) d.set(k, v);
        for (const auto& [k, v] : kw) d.set(k, v);
        return Value::dict(std::move(d));
      },
      "dict");
  (*scope)["range"] = Value::function(
      [](std::vector<Value>& args, KwArgs&) -> Value {
        int64_t start = 0, stop = 0, step = 1;
        if (args.size() == 1)
          stop = args[0].as_int();
        else if (args.size() >= 2)
          start = args[0].as_int(), stop = args[1].as_int();
        if (args.size() >= 3) step = args[2].as_int();
        if (step == 0) throw Error("range() arg 3 must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          out.push_back(Value(i));
          if (out.size() > 10000000) throw Error("range() too large");
        }
        return Value::list(std::move(out));
      },
      "range");
  (*scope)["strftime_now"] = Value::function(
      [](std::vector<Value>& args, KwArgs&) -> Value {
        const std::string fmt = args.empty() ? std::string("%Y-%m-%d") : args[0].to_str();
        const std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

}  // namespace deltatune::jinja
