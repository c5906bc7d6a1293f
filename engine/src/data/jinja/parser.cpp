// Recursive-descent parser following Jinja's grammar and operator precedence:
// condexpr < or < and < not < compare/in < +,- < ~ < *,/,//,% < ** < unary < postfix/filter/test.
#include <set>

#include "core/error.h"
#include "data/jinja/ast.h"

namespace deltatune::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name) : t_(t), name_(name) {}

  NodePtr parse_template() {
    auto root = node(Node::kBody);
    root->body = parse_statements({});
    if (cur().kind != Token::kEof) fail("unexpected '{% " + peek_name() + " %}'");
    return root;
  }

 private:
  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;

  const Token& cur() const { return t_[i_]; }
  const Token& ahead(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(name_ + " line " + std::to_string(cur().line) + ": " + msg);
  }
  NodePtr node(Node::Kind k) const {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = cur().line;
    return n;
  }
  bool is_op(const char* op) const { return cur().kind == Token::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == Token::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "'" + got());
  }
  std::string expect_name() {
    if (cur().kind != Token::kName) fail("expected a name" + got());
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().kind != Token::kBlockEnd) fail("expected '%}'" + got());
    ++i_;
  }
  std::string got() const {
    switch (cur().kind) {
      case Token::kBlockEnd:
        return ", got '%}'";
      case Token::kVarEnd:
        return ", got '}}'";
      case Token::kEof:
        return ", got end of template";
      default:
        return ", got '" + cur().text + "'";
    }
  }
  std::string peek_name() const { return ahead().kind == Token::kName ? ahead().text : "?"; }

  // Statements until a block tag whose name is in `ends` (left unconsumed, pointing at its BlockBegin).
  std::vector<NodePtr> parse_statements(const std::set<std::string>& ends) {
    std::vector<NodePtr> out;
    while (true) {
      const Token& tk = cur();
      if (tk.kind == Token::kEof) {
        if (!ends.empty()) {
          std::string names;
          for (const auto& e : ends) names += (names.empty() ? "" : " or ") + ("{% " + e + " %}");
          fail("missing " + names);
        }
        return out;
      }
      if (tk.kind == Token::kData) {
        auto n = node(Node::kText);
        n->name = tk.text;
        out.push_back(std::move(n));
        ++i_;
      } else if (tk.kind == Token::kVarBegin) {
        ++i_;
        auto n = node(Node::kEmit);
        n->kids.push_back(parse_tuple(true));
        if (cur().kind != Token::kVarEnd) fail("expected '}}'" + got());
        ++i_;
        out.push_back(std::move(n));
      } else if (tk.kind == Token::kBlockBegin) {
        const std::string kw = ahead().kind == Token::kName ? ahead().text : "";
        if (ends.count(kw)) return out;
        ++i_;
        out.push_back(parse_statement());
      } else {
        fail("unexpected token" + got());
      }
    }
  }

  NodePtr parse_statement() {
    if (cur().kind != Token::kName) fail("expected a statement name after '{%'" + got());
    const std::string kw = cur().text;
    if (kw == "if") return parse_if();
    if (kw == "for") return parse_for();
    if (kw == "set") return parse_set();
    if (kw == "macro") return parse_macro();
    if (kw == "break" || kw == "continue") {
      auto n = node(kw == "break" ? Node::kBreak : Node::kContinue);
      ++i_;
      expect_block_end();
      return n;
    }
    if (kw == "generation") {
      auto n = node(Node::kGeneration);
      ++i_;
      expect_block_end();
      n->body = parse_statements({"endgeneration"});
      close_block("endgeneration");
      return n;
    }
    fail("unsupported template construct '{% " + kw + " %}'");
  }

  void close_block(const char* end) {
    ++i_;  // BlockBegin
    if (!skip_name(end)) fail(std::string("expected '{% ") + end + " %}'" + got());
    expect_block_end();
  }

  NodePtr parse_if() {
    auto n = node(Node::kIf);
    ++i_;  // if
    while (true) {
      NodePtr cond = parse_tuple(false);
      expect_block_end();
      auto body = parse_statements({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      ++i_;  // BlockBegin
      const std::string kw = expect_name();
      if (kw == "elif") continue;
      if (kw == "else") {
        expect_block_end();
        n->else_body = parse_statements({"endif"});
        close_block("endif");
      } else {
        expect_block_end();
      }
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for() {
    auto n = node(Node::kFor);
    ++i_;
    n->ops = parse_targets();
    if (!skip_name("in")) fail("expected 'in' in for loop" + got());
    n->kids.push_back(parse_tuple(false, /*stop_at_if=*/true));
    if (skip_name("if")) n->kids.push_back(parse_expression(false));
    if (is_name("recursive")) fail("unsupported template construct 'recursive' for loops");
    expect_block_end();
    n->body = parse_statements({"else", "endfor"});
    ++i_;
    const std::string kw = expect_name();
    expect_block_end();
    if (kw == "else") {
      n->else_body = parse_statements({"endfor"});
      close_block("endfor");
    }
    return n;
  }

  NodePtr parse_set() {
    ++i_;
    const int line = cur().line;
    std::string target = expect_name();
    std::string attr;
    std::vector<std::string> names{target};
    if (skip_op("."))
      attr = expect_name();
    else
      while (skip_op(",")) names.push_back(expect_name());
    if (skip_op("=")) {
      auto n = node(Node::kSet);
      n->line = line;
      n->name = target;
      n->attr = attr;
      n->ops = names;
      n->kids.push_back(parse_tuple(true));
      expect_block_end();
      return n;
    }
    if (!attr.empty() || names.size() > 1) fail("expected '=' in set");
    if (is_op("|")) fail("unsupported template construct 'filtered block set'");
    expect_block_end();
    auto n = node(Node::kSetBlock);
    n->line = line;
    n->name = target;
    n->body = parse_statements({"endset"});
    close_block("endset");
    return n;
  }

  NodePtr parse_macro() {
    auto n = node(Node::kMacro);
    ++i_;
    n->name = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!n->ops.empty()) expect_op(",");
      if (skip_op(")")) break;
      n->ops.push_back(expect_name());
      n->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_block_end();
    n->body = parse_statements({"endmacro"});
    close_block("endmacro");
    return n;
  }

  // ---- expressions ----

  NodePtr parse_tuple(bool with_condexpr, bool stop_at_if = false) {
    (void)stop_at_if;
    const int line = cur().line;
    std::vector<NodePtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
        if (cur().kind == Token::kBlockEnd || cur().kind == Token::kVarEnd || is_op(")") || is_name("if"))
          break;
      }
      items.push_back(parse_expression(with_condexpr));
    }
    if (!comma) return std::move(items[0]);
    auto n = node(Node::kTupleLit);
    n->line = line;
    n->kids = std::move(items);
    return n;
  }

  NodePtr parse_expression(bool with_condexpr) {
    NodePtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      auto n = node(Node::kCondExpr);
      ++i_;
      n->kids.push_back(parse_or());    // condition
      n->kids.push_back(std::move(e));  // then
      if (skip_name("else")) n->kids.push_back(parse_expression(true));
      e = std::move(n);
    }
    return e;
  }

  // `operand (word operand)*`, left-associative: a chain of `or` / `and`.
  template <class Operand> NodePtr parse_word_chain(const char* word, Node::Kind kind, Operand operand) {
    NodePtr l = operand();
    while (is_name(word)) {
      auto n = node(kind);
      ++i_;
      n->kids.push_back(std::move(l));
      n->kids.push_back(operand());
      l = std::move(n);
    }
    return l;
  }

  NodePtr parse_or() { return parse_word_chain("or", Node::kOr, [this] { return parse_and(); }); }
  NodePtr parse_and() { return parse_word_chain("and", Node::kAnd, [this] { return parse_not(); }); }

  NodePtr parse_not() {
    if (is_name("not")) {
      auto n = node(Node::kNot);
      ++i_;
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    NodePtr first = parse_math1();
    NodePtr n;
    while (true) {
      std::string op;
      if (cur().kind == Token::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                       cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && ahead().kind == Token::kName && ahead().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!n) {
        n = node(Node::kCompare);
        n->kids.push_back(std::move(first));
      }
      n->ops.push_back(op);
      n->kids.push_back(parse_math1());
    }
    return n ? std::move(n) : std::move(first);
  }

  NodePtr binary(const std::string& op, NodePtr l, NodePtr r) {
    auto n = node(Node::kBinary);
    n->name = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }

  NodePtr parse_math1() {
    NodePtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[i_++].text;
      l = binary(op, std::move(l), parse_concat());
    }
    return l;
  }

  NodePtr parse_concat() {
    NodePtr l = parse_math2();
    while (is_op("~")) {
      ++i_;
      l = binary("~", std::move(l), parse_math2());
    }
    return l;
  }

  NodePtr parse_math2() {
    NodePtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[i_++].text;
      l = binary(op, std::move(l), parse_pow());
    }
    return l;
  }

  NodePtr parse_pow() {
    NodePtr l = parse_unary(true);
    while (is_op("**")) {
      ++i_;
      l = binary("**", std::move(l), parse_unary(true));
    }
    return l;
  }

  NodePtr parse_unary(bool with_filter) {
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      n = node(is_op("-") ? Node::kNeg : Node::kPos);
      ++i_;
      n->kids.push_back(parse_unary(false));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  NodePtr literal(Value v) {
    auto n = node(Node::kLiteral);
    n->value = std::move(v);
    return n;
  }

  NodePtr parse_primary() {
    const Token& tk = cur();
    switch (tk.kind) {
      case Token::kName: {
        const std::string& s = tk.text;
        if (s == "true" || s == "True") return ++i_, literal(Value(true));
        if (s == "false" || s == "False") return ++i_, literal(Value(false));
        if (s == "none" || s == "None") return ++i_, literal(Value::none());
        auto n = node(Node::kName);
        n->name = s;
        ++i_;
        return n;
      }
      case Token::kString: {
        std::string s;
        const int line = tk.line;
        while (cur().kind == Token::kString) s += t_[i_++].text;
        auto n = literal(Value(s));
        n->line = line;
        return n;
      }
      case Token::kInt: {
        ++i_;
        try {
          return literal(Value(static_cast<int64_t>(std::stoll(tk.text))));
        } catch (const std::exception&) {
          fail("integer literal out of range: " + tk.text);
        }
      }
      case Token::kFloat:
        ++i_;
        return literal(Value(std::stod(tk.text)));
      case Token::kOp: {
        if (tk.text == "(") {
          ++i_;
          if (skip_op(")")) {
            auto n = node(Node::kTupleLit);
            return n;
          }
          NodePtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (tk.text == "[") {
          auto n = node(Node::kListLit);
          ++i_;
          while (!skip_op("]")) {
            if (!n->kids.empty()) {
              expect_op(",");
              if (skip_op("]")) break;
            }
            n->kids.push_back(parse_expression(true));
          }
          return n;
        }
        if (tk.text == "{") {
          auto n = node(Node::kDictLit);
          ++i_;
          while (!skip_op("}")) {
            if (!n->kids.empty()) {
              expect_op(",");
              if (skip_op("}")) break;
            }
            n->kids.push_back(parse_expression(true));
            expect_op(":");
            n->kids.push_back(parse_expression(true));
          }
          return n;
        }
        break;
      }
      default:
        break;
    }
    fail("unexpected" + got().substr(1));
  }

  void parse_call_args(Node* n) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("unsupported template construct '*args/**kwargs' in a call");
      if (cur().kind == Token::kName && ahead().kind == Token::kOp && ahead().text == "=") {
        n->kwnames.push_back(cur().text);
        i_ += 2;
        n->kwvalues.push_back(parse_expression(true));
      } else {
        if (!n->kwnames.empty()) fail("positional argument after keyword argument");
        n->kids.push_back(parse_expression(true));
      }
    }
  }

  NodePtr parse_postfix(NodePtr n) {
    while (true) {
      if (is_op(".")) {
        ++i_;
        auto a = node(Node::kGetAttr);
        if (cur().kind == Token::kName) {
          a->name = t_[i_++].text;
          a->kids.push_back(std::move(n));
          n = std::move(a);
        } else if (cur().kind == Token::kInt) {
          a->kind = Node::kGetItem;
          a->kids.push_back(std::move(n));
          a->kids.push_back(literal(Value(static_cast<int64_t>(std::stoll(t_[i_++].text)))));
          n = std::move(a);
        } else {
          fail("expected an attribute name after '.'" + got());
        }
      } else if (is_op("[")) {
        ++i_;
        NodePtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = parse_expression(true);
        if (skip_op(":")) {
          slice = true;
          if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
          if (skip_op(":") && !is_op("]")) step = parse_expression(true);
        }
        expect_op("]");
        auto s = node(slice ? Node::kSlice : Node::kGetItem);
        s->kids.push_back(std::move(n));
        if (slice) {
          s->kids.push_back(std::move(start));
          s->kids.push_back(std::move(stop));
          s->kids.push_back(std::move(step));
        } else {
          s->kids.push_back(std::move(start));
        }
        n = std::move(s);
      } else if (is_op("(")) {
        auto c = node(Node::kCall);
        c->kids.push_back(std::move(n));
        parse_call_args(c.get());
        n = std::move(c);
      } else {
        return n;
      }
    }
  }

  NodePtr parse_filter_expr(NodePtr n) {
    while (true) {
      if (is_op("|")) {
        ++i_;
        auto f = node(Node::kFilter);
        f->name = expect_name();
        while (is_op(".") && ahead().kind == Token::kName) f->name += "." + (i_++, t_[i_++].text);
        f->kids.push_back(std::move(n));
        if (is_op("(")) parse_call_args(f.get());
        n = std::move(f);
      } else if (is_name("is")) {
        ++i_;
        auto t = node(Node::kTest);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (is_op(".") && ahead().kind == Token::kName) t->name += "." + (i_++, t_[i_++].text);
        t->kids.push_back(std::move(n));
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if ((cur().kind == Token::kName || cur().kind == Token::kString || cur().kind == Token::kInt ||
                    cur().kind == Token::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
          if (is_name("is")) fail("you cannot chain multiple tests with is");
          t->kids.push_back(parse_postfix(parse_primary()));
        }
        n = std::move(t);
      } else if (is_op("(")) {
        auto c = node(Node::kCall);
        c->kids.push_back(std::move(n));
        parse_call_args(c.get());
        n = std::move(c);
      } else {
        return n;
      }
    }
  }
};

}  // namespace

NodePtr parse(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).parse_template();
}

}  // namespace deltatune::jinja
