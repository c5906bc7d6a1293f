// Internal: tokens and syntax tree of the Jinja subset.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/jinja/value.h"

namespace deltatune::jinja {

struct Token {
  enum Kind {
    kData,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  } kind;
  std::string text;  // data, name, decoded string literal, operator, number spelling
  int line = 1;
};

// Lexes template source with trim_blocks/lstrip_blocks semantics; throws Error on malformed tags.
std::vector<Token> lex(const std::string& source, const std::string& name);

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  enum Kind {
    // statements
    kBody,
    kText,
    kEmit,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kBreak,
    kContinue,
    kGeneration,
    // expressions
    kLiteral,
    kName,
    kGetAttr,
    kGetItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kPos,
    kBinary,
    kAnd,
    kOr,
    kCompare,
    kCondExpr,
    kListLit,
    kTupleLit,
    kDictLit
  } kind;
  int line = 0;
  Value value;                       // kLiteral
  std::string name;                  // name / attribute / filter / test / operator / macro / set target
  std::vector<NodePtr> kids;         // operands, positional args, list items, dict keys+values interleaved
  std::vector<std::string> kwnames;  // call/filter/test keyword names (their values follow kids' positionals)
  std::vector<NodePtr> kwvalues;
  std::vector<std::string> ops;          // kCompare operators, kFor/kSet targets, kMacro params
  std::vector<NodePtr> defaults;         // kMacro param defaults (nullptr = none)
  std::vector<NodePtr> body, else_body;  // statements
  std::vector<std::pair<NodePtr, std::vector<NodePtr>>> branches;  // kIf: (cond, body)...
  bool negated = false;                                            // kTest
  std::string attr;                                                // kSet with namespace attribute target
};

NodePtr parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace deltatune::jinja
