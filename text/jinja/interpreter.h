// The Jinja interpreter: walks a parsed template over a context of variables.
//
// Scoping as Jinja's: a for loop has one scope of its own (a `set` inside it is not seen after
// the loop, which is why templates use namespace()), `if` has none, a macro call has its own on
// top of the scope the macro was defined in. Guards (a template is data from a model folder):
// a bound on the rendered size and on every string built (max_output_bytes), on the items of
// every list built (max_list_items), on nested macro calls (max_call_depth), on nested
// evaluation (max_eval_depth) and on evaluation steps (max_steps: loop iterations and calls,
// filter items, comparisons of unique, and bytes that operations copy or scan). Each is checked before the memory is taken, so
// a refused render costs little more than the limits. Loops walk their sequence in place (a
// list is not copied, range() makes no list), and nothing a loop step makes outlives the step
// unless the template stores it: a render's memory does not grow with its loop counts.
// Internal errors are jinja::Error exceptions; Template (template.h) catches them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace banyan::text::jinja {

// Bytes an operation may copy or scan for one step (Interpreter::Charge): max_steps of them
// are 640 MB, a second or so.
inline constexpr size_t kBytesPerStep = 128;

// The stack a render may take below Run's frame: a quarter of a default 8 MiB thread stack.
inline constexpr size_t kMaxStackBytes = size_t{2} << 20;

struct Limits {
  size_t max_output_bytes = size_t{8} << 20;
  // At 32 bytes an item (plus what items hold), a list costs at most 8 MiB, as the output does.
  size_t max_list_items = size_t{1} << 18;
  int max_call_depth = 64;
  // Expressions and statements being evaluated inside each other, across macro calls: the
  // parser bounds one template's nesting, this bounds how deep a render recurses. The stack it
  // takes is bounded too (kMaxStackBytes), whatever the build's frame sizes.
  int max_eval_depth = 2000;
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
  // Throws when a list of `items` would pass max_list_items.
  void CheckItems(size_t items, int line = 0) const;
  // str(v), refused past the output limit.
  std::string Str(const Value& v) const { return v.ToString(limits_.max_output_bytes); }
  size_t max_output_bytes() const { return limits_.max_output_bytes; }
  size_t max_list_items() const { return limits_.max_list_items; }
  // The items of an iterable value as a new list (CheckItems first).
  List Items(const Value& v, int line);
  // Counts one evaluation step; throws past max_steps.
  void Tick(int line = 0);
  // Counts the steps of an operation over `bytes` of values (kBytesPerStep a step), so that
  // a template that copies or scans big values over and over (s = s ~ x in a loop: quadratic)
  // stops at max_steps as a loop does.
  void Charge(size_t bytes, int line = 0);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string* out);
  Flow ExecOne(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  void ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  void ExecSet(const Stmt& s, const std::shared_ptr<Frame>& frame);
  // Binds a for loop's or set's target names to `item` (unpacking it for several names).
  void Bind(const std::vector<std::string>& targets, const Value& item, Frame* scope, int line);
  // Appends str(v) to *out, refused past the output limit before it is built.
  void Emit(const Value& v, std::string* out, int line);
  Value MakeMacro(const Stmt& s, const std::shared_ptr<Frame>& frame);

  Value Eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalBinary(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Frame>& frame);
  Value Lookup(std::string_view name, const Frame& frame) const;

  Limits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  uintptr_t stack_base_ = 0;  // Run's frame address (stacks grow down)
  struct Deeper {  // counts one level of eval_depth_ while in scope
    Deeper(Interpreter* in, int line);
    ~Deeper() { --in->eval_depth_; }
    Interpreter* in;
  };
  std::shared_ptr<Frame> root_;
};

// The bytes a value's own storage takes (a string's bytes, a list's or dict's items), for
// Interpreter::Charge.
size_t Footprint(const Value& v);

// Python's x[key] / getattr for templates: dict key, list or range index (negative from the
// end), string character; undefined when absent.
Value GetItem(const Value& obj, const Value& key);
// Python's slicing x[start:stop:step] of a list or string (code points).
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);

// The items of an iterable value one at a time, without copying a list or making a range's:
// a list's items, a dict's keys, a string's characters, a range's numbers.
class Cursor {
 public:
  // Error "'int' object is not iterable" for a value that is not; undefined is empty.
  Cursor(Value v, int line);
  int64_t size() const { return size_; }
  // The next item into *item; false at the end.
  bool Next(Value* item);

 private:
  Value v_;
  int64_t size_ = 0;
  int64_t index_ = 0;
  size_t byte_ = 0;  // strings: where the next character starts
};

}  // namespace banyan::text::jinja
