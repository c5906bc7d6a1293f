// Values of the Jinja-subset interpreter, with Python semantics where templates can observe them
// (str(), repr(), truthiness, equality, json.dumps as HF's `tojson`).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deltatune::jinja {

class Value;
using List = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(std::vector<Value>& args, KwArgs& kwargs)>;

// Insertion-ordered string-keyed map (Python dict order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value none();
  Value(bool b);
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(const char* s);
  Value(std::string s);
  static Value list(List items = {}, bool tuple = false);
  static Value dict(Dict d = {}, bool is_namespace = false);
  static Value function(Function fn, std::string name);
  // Jinja's Markup (|safe, |escape): printed as is, but `+` with a plain string HTML-escapes the plain one
  // (HF renders without autoescape, so only that concatenation and Markup's own methods differ).
  static Value markup(std::string s);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const;                         // bool/int (float truncated)
  double as_double() const;                       // bool/int/float
  const std::string& str() const { return *s_; }  // kString only
  const std::string& undefined_hint() const;
  List& items() const { return *list_; }     // kList
  Dict& dict_ref() const { return *dict_; }  // kDict
  const Function& fn() const { return *fn_; }
  const std::string& fn_name() const { return *s_; }

  bool truthy() const;
  std::string to_str() const;     // Python str()
  std::string repr() const;       // Python repr()
  std::string type_name() const;  // Python type name for messages ("dict object", ...)

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false, tuple_ = false, namespace_ = false, markup_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

bool values_equal(const Value& a, const Value& b);
// <0, 0, >0; throws Error for unorderable types.
int values_compare(const Value& a, const Value& b);
std::string python_float_repr(double v);
std::string python_str_repr(const std::string& s);

struct JsonOptions {
  int indent = -1;                // < 0: no newlines
  std::string item_sep, key_sep;  // defaults chosen like json.dumps when empty
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(value, ...) as HF's tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace deltatune::jinja
