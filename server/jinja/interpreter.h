// The Jinja interpreter: walks a parsed template over a context of variables.
//
// Scoping as Jinja's: a for loop has one scope of its own (a `set` inside it is not seen after
// the loop, which is why templates use namespace()), `if` has none, a macro call has its own on
// top of the scope the macro was defined in. Guards (a template is data from a model folder):
// a bound on the rendered size and on every string built (max_output_bytes), on nested macro
// calls (max_call_depth) and on evaluation steps (max_steps: loop iterations and calls).
// Internal errors are jinja::Error exceptions; Template (template.h) catches them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/jinja/ast.h"
#include "server/jinja/value.h"

namespace banyan::jinja {

struct Limits {
  size_t max_output_bytes = size_t{8} << 20;
  int max_call_depth = 64;
  int64_t max_steps = 5'000'000;
};

// A scope: variables, and the scope it sits in.
struct Frame {
  Dict vars;
  std::shared_ptr<Frame> parent;
};

class Interpreter {
 public:
  explicit Interpreter(Limits limits) : limits_(limits) {}

  // Renders `body` with `globals` (the context plus the built-in globals).
  std::string Run(const Body& body, Dict globals);

  // Calls a callable value (macro, global function, bound method).
  Value Call(const Value& fn, CallArgs& args);
  // Throws when a string of `bytes` would pass the output limit.
  void CheckSize(size_t bytes, int line = 0) const;
  // Counts one evaluation step; throws past max_steps.
  void Tick(int line = 0);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string* out);
  Flow ExecOne(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  void ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  void ExecSet(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Value MakeMacro(const Stmt& s, const std::shared_ptr<Frame>& frame);

  Value Eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalBinary(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Frame>& frame);
  Value Lookup(std::string_view name, const Frame& frame) const;

  Limits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::shared_ptr<Frame> root_;
};

// Python's x[key] / getattr for templates: dict key, list index (negative from the end),
// string character; undefined when absent.
Value GetItem(const Value& obj, const Value& key);
// Python's slicing x[start:stop:step] of a list or string (code points).
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);
// Items a for loop or filter iterates: a list's items, a dict's keys, a string's characters.
List Iterate(const Value& v, int line);

}  // namespace banyan::jinja
