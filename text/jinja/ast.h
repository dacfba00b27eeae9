// The syntax tree the parser builds and the interpreter walks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace banyan::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: items (also tuples)
  kDict,     // kwargs-like pairs in `pairs`
  kGetAttr,  // args[0].name
  kGetItem,  // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs)
  kTest,     // args[0] is [not] name(args[1..])
  kUnary,    // name: "not" or "-" or "+"; args[0]
  kBinary,   // name: the operator ("and", "or", "in", "not in", "==", "+", "~", ...); args[0], args[1]
  kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;  // dict literal: key, value
  bool negated = false;                            // kTest: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches: (cond, body)...; else_body
  kFor,       // targets in expr [if cond]: body; else_body
  kSet,       // targets = expr, or target.attr = expr (attr non-empty), or a block set (body)
  kMacro,     // name(params): body
  kCallBlock, // {% call(params) expr %} body {% endcall %}
  kFilterBlock,  // {% filter expr %} body: expr is a kFilter on a null operand
  kBreak,
  kContinue,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kText; kMacro: name; kSet: attribute of a namespace
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet, kCallBlock, kFilterBlock
  ExprPtr cond;                      // kFor: the `if` filter
  std::vector<std::string> targets;  // kFor, kSet
  std::vector<Param> params;         // kMacro, kCallBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
};

}  // namespace banyan::text::jinja
