// Tree-walking evaluator. Scoping follows Jinja: `for` bodies get a fresh scope per iteration, `if`
// does not create one, macros see their parameters plus the template's top-level scope, and
// attribute assignment is allowed only on namespace() objects.
#include <unordered_map>

#include "core/error.h"
#include "data/jinja/ast.h"
#include "data/jinja/builtins.h"
#include "data/jinja/template.h"

namespace deltatune::jinja {
namespace {

// An Error that already carries "<name> line N:" so outer frames do not prefix it again.
class LocatedError : public Error {
 public:
  using Error::Error;
};

using Scope = std::unordered_map<std::string, Value>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& name, const Value& context) : name_(name) {
    auto root = std::make_shared<Scope>();
    add_globals(root.get());
    if (context.is_dict())
      for (const auto& [k, v] : context.dict_ref().items) (*root)[k] = v;
    scopes_.push_back(root);
    root_ = root;
  }

  Flow render(const std::vector<NodePtr>& body, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  const std::string& name_;
  std::vector<std::shared_ptr<Scope>> scopes_;
  std::shared_ptr<Scope> root_;
  int macro_depth_ = 0;

  [[noreturn]] void rethrow(const Node& n, const Error& e) {
    if (dynamic_cast<const LocatedError*>(&e)) throw;
    throw LocatedError(name_ + " line " + std::to_string(n.line) + ": " + e.what());
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }

  void assign_targets(const std::vector<std::string>& names, const Value& v, const Node& n) {
    if (names.size() == 1) {
      assign(names[0], v);
      return;
    }
    if (!v.is_list() || v.items().size() != names.size())
      throw LocatedError(name_ + " line " + std::to_string(n.line) + ": cannot unpack " + v.type_name() +
                         " into " + std::to_string(names.size()) + " names");
    for (size_t i = 0; i < names.size(); ++i) assign(names[i], v.items()[i]);
  }

  Flow exec(const Node& n, std::string& out) {
    try {
      switch (n.kind) {
        case Node::kText:
          out += n.name;
          return Flow::kNormal;
        case Node::kEmit:
          out += eval(*n.kids[0]).to_str();
          return Flow::kNormal;
        case Node::kIf:
          for (const auto& [cond, body] : n.branches)
            if (eval(*cond).truthy()) return render(body, out);
          return render(n.else_body, out);
        case Node::kFor:
          return exec_for(n, out);
        case Node::kSet: {
          Value v = eval(*n.kids[0]);
          if (!n.attr.empty()) {
            Value target = lookup(n.name);
            if (!target.is_namespace())
              throw Error("cannot assign attribute '" + n.attr + "' on '" + n.name + "' (not a namespace)");
            target.dict_ref().set(n.attr, std::move(v));
          } else {
            assign_targets(n.ops, v, n);
          }
          return Flow::kNormal;
        }
        case Node::kSetBlock: {
          std::string captured;
          render(n.body, captured);
          assign(n.name, Value(captured));
          return Flow::kNormal;
        }
        case Node::kMacro:
          define_macro(n);
          return Flow::kNormal;
        case Node::kBreak:
          return Flow::kBreak;
        case Node::kContinue:
          return Flow::kContinue;
        case Node::kGeneration:
          return render(n.body, out);
        default:
          throw Error("internal: expression node used as a statement");
      }
    } catch (const Error& e) {
      rethrow(n, e);
    }
  }

  Flow exec_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.kids[0]);
    List items = iterate(seq);
    if (n.kids.size() > 1) {  // `for x in xs if cond`: filter first, so loop.* counts kept items
      List kept;
      for (const auto& item : items) {
        scopes_.push_back(std::make_shared<Scope>());
        assign_targets(n.ops, item, n);
        const bool ok = eval(*n.kids[1]).truthy();
        scopes_.pop_back();
        if (ok) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(n.else_body, out);
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      auto scope = std::make_shared<Scope>();
      scopes_.push_back(scope);
      Dict loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem",
               i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem",
               i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::function(
                            [i](std::vector<Value>& args, KwArgs&) -> Value {
                              if (args.empty()) throw Error("loop.cycle needs at least one argument");
                              return args[static_cast<size_t>(i) % args.size()];
                            },
                            "loop.cycle"));
      (*scope)["loop"] = Value::dict(std::move(loop));
      assign_targets(n.ops, items[static_cast<size_t>(i)], n);
      const Flow f = render(n.body, out);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const Node& n) {
    const Node* def = &n;
    Renderer* self = this;
    assign(n.name,
           Value::function([self, def](std::vector<Value>& args,
                                       KwArgs& kw) -> Value { return self->call_macro(*def, args, kw); },
                           n.name));
  }

  Value call_macro(const Node& def, std::vector<Value>& args, KwArgs& kw) {
    if (++macro_depth_ > 100) throw Error("macro '" + def.name + "' recursion is too deep");
    auto locals = std::make_shared<Scope>();
    std::vector<std::shared_ptr<Scope>> saved;
    saved.swap(scopes_);
    scopes_ = {root_, locals};
    try {
      if (args.size() > def.ops.size())
        throw Error("macro '" + def.name + "' takes " + std::to_string(def.ops.size()) + " arguments");
      for (size_t p = 0; p < def.ops.size(); ++p) {
        const std::string& pname = def.ops[p];
        Value v;
        bool have = false;
        if (p < args.size()) v = args[p], have = true;
        for (const auto& [k, x] : kw)
          if (k == pname) v = x, have = true;
        if (!have)
          v = def.defaults[p] ? eval(*def.defaults[p]) : Value::undefined("'" + pname + "' is undefined");
        (*locals)[pname] = v;
      }
      for (const auto& [k, x] : kw)
        if (std::find(def.ops.begin(), def.ops.end(), k) == def.ops.end())
          throw Error("macro '" + def.name + "' has no parameter named '" + k + "'");
      std::string out;
      render(def.body, out);
      scopes_.swap(saved);
      --macro_depth_;
      return Value(out);
    } catch (...) {
      scopes_.swap(saved);
      --macro_depth_;
      throw;
    }
  }

  void eval_args(const Node& n, size_t first, std::vector<Value>* args, KwArgs* kw) {
    for (size_t i = first; i < n.kids.size(); ++i) args->push_back(eval(*n.kids[i]));
    for (size_t i = 0; i < n.kwnames.size(); ++i) kw->emplace_back(n.kwnames[i], eval(*n.kwvalues[i]));
  }

  Value eval(const Node& n) {
    try {
      return eval_inner(n);
    } catch (const Error& e) {
      rethrow(n, e);
    }
  }

  Value eval_inner(const Node& n) {
    switch (n.kind) {
      case Node::kLiteral:
        return n.value;
      case Node::kName:
        return lookup(n.name);
      case Node::kGetAttr:
        return get_attr(eval(*n.kids[0]), n.name);
      case Node::kGetItem:
        return get_item(eval(*n.kids[0]), eval(*n.kids[1]));
      case Node::kSlice: {
        const Value obj = eval(*n.kids[0]);
        auto opt = [&](size_t k) { return n.kids[k] ? eval(*n.kids[k]) : Value::none(); };
        return get_slice(obj, opt(1), opt(2), opt(3));
      }
      case Node::kCall: {
        const Value callee = eval(*n.kids[0]);
        if (!callee.is_function()) {
          if (callee.is_undefined())
            throw Error(callee.undefined_hint().empty()
                            ? "call of an undefined value"
                            : callee.undefined_hint() + " (called as a function)");
          throw Error("'" + callee.type_name() + "' object is not callable");
        }
        std::vector<Value> args;
        KwArgs kw;
        eval_args(n, 1, &args, &kw);
        return callee.fn()(args, kw);
      }
      case Node::kFilter: {
        if (!has_filter(n.name)) throw Error("unsupported template construct: filter '" + n.name + "'");
        const Value subject = eval(*n.kids[0]);
        std::vector<Value> args;
        KwArgs kw;
        eval_args(n, 1, &args, &kw);
        return apply_filter(n.name, subject, args, kw);
      }
      case Node::kTest: {
        if (!has_test(n.name)) throw Error("unsupported template construct: test '" + n.name + "'");
        const Value subject = eval(*n.kids[0]);
        std::vector<Value> args;
        KwArgs kw;
        eval_args(n, 1, &args, &kw);
        return Value(apply_test(n.name, subject, args) != n.negated);
      }
      case Node::kNot:
        return Value(!eval(*n.kids[0]).truthy());
      case Node::kNeg:
      case Node::kPos: {
        const Value x = eval(*n.kids[0]);
        if (!x.is_number())
          throw Error("bad operand type for unary " + std::string(n.kind == Node::kNeg ? "-" : "+") + ": '" +
                      x.type_name() + "'");
        if (n.kind == Node::kPos) return x.is_float() ? Value(x.as_double()) : Value(x.as_int());
        return x.is_float() ? Value(-x.as_double()) : Value(-x.as_int());
      }
      case Node::kAnd: {
        Value l = eval(*n.kids[0]);
        return l.truthy() ? eval(*n.kids[1]) : l;
      }
      case Node::kOr: {
        Value l = eval(*n.kids[0]);
        return l.truthy() ? l : eval(*n.kids[1]);
      }
      case Node::kBinary: {
        const Value a = eval(*n.kids[0]), b = eval(*n.kids[1]);
        if (n.name == "~") return Value(a.to_str() + b.to_str());
        return binary_op(n.name, a, b);
      }
      case Node::kCompare: {
        Value left = eval(*n.kids[0]);
        for (size_t k = 0; k < n.ops.size(); ++k) {
          Value right = eval(*n.kids[k + 1]);
          const std::string& op = n.ops[k];
          bool ok;
          if (op == "==")
            ok = values_equal(left, right);
          else if (op == "!=")
            ok = !values_equal(left, right);
          else if (op == "in")
            ok = contains(right, left);
          else if (op == "notin")
            ok = !contains(right, left);
          else {
            const int c = values_compare(left, right);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Node::kCondExpr: {
        if (eval(*n.kids[0]).truthy()) return eval(*n.kids[1]);
        if (n.kids.size() > 2) return eval(*n.kids[2]);
        return Value::undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
      case Node::kListLit:
      case Node::kTupleLit: {
        List items;
        for (const auto& k : n.kids) items.push_back(eval(*k));
        return Value::list(std::move(items), n.kind == Node::kTupleLit);
      }
      case Node::kDictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          const Value key = eval(*n.kids[k]);
          if (!key.is_string())
            throw Error("unsupported template construct: dict literal with a non-string key");
          d.set(key.str(), eval(*n.kids[k + 1]));
        }
        return Value::dict(std::move(d));
      }
      default:
        throw Error("internal: statement node used as an expression");
    }
  }
};

}  // namespace

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  root_ = parse(lex(source, name_), name_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& context) const {
  Renderer r(name_, context);
  std::string out;
  const Flow f = r.render(root_->body, out);
  if (f != Flow::kNormal) throw Error(name_ + ": 'break'/'continue' outside a loop");
  return out;
}

}  // namespace deltatune::jinja
