#include "text/jinja/interpreter.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>

#include "text/jinja/builtins.h"

namespace banyan::text::jinja {
namespace {

int64_t ToIndex(const Value& v, int line) {
  if (v.is_int()) return v.int_value();
  if (v.is_bool()) return v.bool_value() ? 1 : 0;
  throw Error("indices must be integers, not " + std::string(v.TypeName()), line);
}

[[noreturn]] void BadOperands(std::string_view op, const Value& a, const Value& b, int line) {
  if (a.is_undefined() || b.is_undefined()) {
    throw Error("an undefined value in '" + std::string(op) + "'", line);
  }
  throw Error("unsupported operand types for " + std::string(op) + ": '" +
                  std::string(a.TypeName()) + "' and '" + std::string(b.TypeName()) + "'",
              line);
}

// Python's integer // and %, which round towards negative infinity.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!key.is_string()) return Value();
    const Value* v = obj.dict().Find(key.str());
    return v ? *v : Value();
  }
  if (!key.is_int() && !key.is_bool()) return Value();
  int64_t i = ToIndex(key, 0);
  if (obj.is_list() || obj.is_range()) {
    const int64_t n =
        obj.is_list() ? static_cast<int64_t>(obj.list().size()) : obj.range().size();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    if (obj.is_range()) return Value(obj.range().At(i));
    return obj.list()[static_cast<size_t>(i)];
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (i < 0) i += static_cast<int64_t>(Utf8Length(s));
    if (i < 0) return Value();
    const size_t at = Utf8Offset(s, static_cast<size_t>(i));
    if (at >= s.size()) return Value();
    return Value(s.substr(at, Utf8Next(s, at)));
  }
  return Value();
}

Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v,
            int line) {
  auto opt = [&](const Value& v, int64_t dflt) {
    return v.is_undefined() || v.is_none() ? dflt : ToIndex(v, line);
  };
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    n = static_cast<int64_t>(Utf8Length(obj.str()));
  } else {
    throw Error("cannot slice a value of type " + std::string(obj.TypeName()), line);
  }
  const int64_t step = opt(step_v, 1);
  if (step == 0) throw Error("slice step cannot be zero", line);
  auto clamp = [&](int64_t i) {
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = clamp(step > 0 ? opt(start_v, 0) : opt(start_v, n - 1));
  const int64_t stop = clamp(step > 0 ? opt(stop_v, n) : opt(stop_v, -n - 1));
  // The picked indices: start, start + step, ... short of stop (never more than n).
  auto picked = [&](int64_t i) {
    const __int128 d = step > 0 ? __int128{i} - start : __int128{start} - i;
    const __int128 s = step > 0 ? __int128{step} : -__int128{step};
    return d >= 0 && d % s == 0 && (step > 0 ? i < stop : i > stop);
  };
  if (obj.is_list()) {
    List out;
    const Range r{start, stop, step};
    out.reserve(static_cast<size_t>(r.size()));
    for (int64_t k = 0; k < r.size(); ++k) out.push_back(obj.list()[static_cast<size_t>(r.At(k))]);
    return Value(std::move(out));
  }
  // Strings: one walk over the code points, forwards or backwards, with no table of offsets.
  const std::string& s = obj.str();
  std::string out;
  if (step > 0) {
    int64_t i = 0;
    for (size_t at = 0; at < s.size() && i < stop; ++i) {
      const size_t len = Utf8Next(s, at);
      if (picked(i)) out.append(s, at, len);
      at += len;
    }
  } else {
    int64_t i = n - 1;
    for (size_t at = s.size(); at > 0 && i > stop; --i) {
      const size_t prev = Utf8Prev(s, at);
      if (picked(i)) out.append(s, prev, at - prev);
      at = prev;
    }
  }
  return Value(std::move(out));
}

Cursor::Cursor(Value v, int line) : v_(std::move(v)) {
  if (v_.is_list()) {
    size_ = static_cast<int64_t>(v_.list().size());
  } else if (v_.is_dict()) {
    size_ = static_cast<int64_t>(v_.dict().size());
  } else if (v_.is_string()) {
    size_ = static_cast<int64_t>(Utf8Length(v_.str()));
  } else if (v_.is_range()) {
    size_ = v_.range().size();
  } else if (!v_.is_undefined()) {  // Jinja iterates an undefined value as empty
    throw Error("'" + std::string(v_.TypeName()) + "' object is not iterable", line);
  }
}

bool Cursor::Next(Value* item) {
  if (index_ >= size_) return false;
  const auto i = static_cast<size_t>(index_);
  if (v_.is_list()) {
    *item = v_.list()[i];
  } else if (v_.is_dict()) {
    // A namespace may lose keys while a loop walks it.
    if (i >= v_.dict().size()) return false;
    *item = Value(v_.dict().items()[i].first);
  } else if (v_.is_string()) {
    const size_t len = Utf8Next(v_.str(), byte_);
    *item = Value(v_.str().substr(byte_, len));
    byte_ += len;
  } else {
    *item = Value(v_.range().At(index_));
  }
  ++index_;
  return true;
}

List Interpreter::Items(const Value& v, int line) {
  if (v.is_list()) return v.list();
  Cursor c(v, line);
  CheckItems(static_cast<size_t>(c.size()), line);
  List out;
  out.reserve(static_cast<size_t>(c.size()));
  for (Value item; c.Next(&item);) out.push_back(std::move(item));
  return out;
}

std::string Interpreter::Run(const Body& body, Dict globals) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  root_ = std::make_shared<Frame>();
  root_->vars = std::move(globals);
  std::string out;
  if (Exec(body, root_, &out) != Flow::kNormal) {
    throw Error("'break' or 'continue' outside of a loop");
  }
  return out;
}

void Interpreter::CheckSize(size_t bytes, int line) const {
  if (bytes > limits_.max_output_bytes) {
    throw Error("the rendered text would exceed " + std::to_string(limits_.max_output_bytes) +
                    " bytes",
                line);
  }
}

void Interpreter::CheckItems(size_t items, int line) const {
  if (items > limits_.max_list_items) {
    throw Error("a list of " + std::to_string(items) + " items would exceed the limit of " +
                    std::to_string(limits_.max_list_items) + " items",
                line);
  }
}

void Interpreter::Emit(const Value& v, std::string* out, int line) {
  const size_t left = limits_.max_output_bytes - std::min(limits_.max_output_bytes, out->size());
  if (v.is_string()) {
    CheckSize(out->size() + v.str().size(), line);
    out->append(v.str());
    return;
  }
  try {
    out->append(v.ToString(left));
  } catch (Error&) {
    CheckSize(limits_.max_output_bytes + 1, line);  // the same message as any other overflow
    throw;
  }
}

Interpreter::Deeper::Deeper(Interpreter* in, int line) : in(in) {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (++in->eval_depth_ > in->limits_.max_eval_depth ||
      in->stack_base_ - std::min(here, in->stack_base_) > kMaxStackBytes) {
    --in->eval_depth_;
    throw Error("the template nests too deeply at run time (more than " +
                    std::to_string(in->limits_.max_eval_depth) + " evaluations or " +
                    std::to_string(kMaxStackBytes >> 10) + " KiB of stack; runaway recursion?)",
                line);
  }
}

size_t Footprint(const Value& v) {
  if (v.is_string()) return v.str().size();
  if (v.is_list()) return v.list().size() * sizeof(Value);
  if (v.is_dict()) return v.dict().size() * (sizeof(Value) + sizeof(std::string));
  return 0;
}

void Interpreter::Charge(size_t bytes, int line) {
  steps_ += static_cast<int64_t>(std::min<size_t>(bytes / kBytesPerStep, INT64_MAX / 2));
  if (steps_ > limits_.max_steps) Tick(line);  // throws
}

void Interpreter::Tick(int line) {
  if (++steps_ > limits_.max_steps) {
    throw Error("the template ran for more than " + std::to_string(limits_.max_steps) +
                    " steps (a runaway loop?)",
                line);
  }
}

Interpreter::Flow Interpreter::Exec(const Body& body, const std::shared_ptr<Frame>& frame,
                                    std::string* out) {
  for (const auto& s : body) {
    Flow f = ExecOne(*s, frame, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecOne(const Stmt& s, const std::shared_ptr<Frame>& frame,
                                       std::string* out) {
  Tick(s.line);
  Deeper deeper(this, s.line);
  try {
    switch (s.kind) {
      case StmtKind::kText:
        out->append(s.text);
        break;
      case StmtKind::kOutput:
        Emit(Eval(*s.expr, frame), out, s.line);
        break;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (Eval(*cond, frame).Truthy()) return Exec(body, frame, out);
        }
        return Exec(s.else_body, frame, out);
      case StmtKind::kFor:
        ExecFor(s, frame, out);
        break;
      case StmtKind::kSet:
        ExecSet(s, frame);
        break;
      case StmtKind::kMacro:
        frame->vars.Set(s.text, MakeMacro(s, frame));
        break;
      case StmtKind::kCallBlock: {
        const Stmt* self = &s;
        std::weak_ptr<Frame> weak = frame;
        Value caller = Value::Callable("caller", [this, self, weak](Interpreter&, CallArgs& a) {
          auto f = std::make_shared<Frame>();
          f->parent = weak.lock();
          if (!f->parent) f->parent = root_;
          for (size_t i = 0; i < self->params.size(); ++i) {
            const Value* v = a.Get(i, self->params[i].name);
            f->vars.Set(self->params[i].name,
                        v ? *v
                          : self->params[i].default_value
                              ? Eval(*self->params[i].default_value, f)
                              : Value());
          }
          std::string body;
          Exec(self->body, f, &body);
          return Value(std::move(body));
        });
        const Expr& call = *s.expr;
        Value fn = Eval(*call.args[0], frame);
        CallArgs args = EvalArgs(call, 1, frame);
        args.keyword.emplace_back("caller", std::move(caller));
        Emit(Call(fn, args), out, s.line);
        break;
      }
      case StmtKind::kFilterBlock: {
        std::string body;
        Exec(s.body, frame, &body);
        const Expr& f = *s.expr;
        CallArgs args = EvalArgs(f, 1, frame);
        Emit(ApplyFilter(*this, f.name, Value(std::move(body)), args), out, s.line);
        break;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  } catch (Error& e) {
    if (e.line() == 0) e.set_line(s.line);
    throw;
  }
  CheckSize(out->size(), s.line);
  return Flow::kNormal;
}

void Interpreter::Bind(const std::vector<std::string>& targets, const Value& item, Frame* scope,
                       int line) {
  if (targets.size() == 1) {
    scope->vars.Set(targets[0], item);
    return;
  }
  Cursor parts(item, line);
  if (parts.size() != static_cast<int64_t>(targets.size())) {
    throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                    std::to_string(targets.size()) + " names",
                line);
  }
  Value part;
  for (size_t i = 0; parts.Next(&part); ++i) scope->vars.Set(targets[i], part);
}

// The loop walks its sequence with a cursor and one item of lookahead (loop.nextitem), so a
// step holds three items and one `loop` dict whatever the loop's length. With an `if` filter,
// the items it keeps are collected first (loop.length counts them), within max_list_items.
void Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out) {
  auto scope = std::make_shared<Frame>();
  scope->parent = frame;
  Cursor all(Eval(*s.expr, frame), s.line);
  std::optional<Cursor> kept;
  if (s.cond) {
    List items;
    for (Value item; all.Next(&item);) {
      Tick(s.line);
      Bind(s.targets, item, scope.get(), s.line);
      if (!Eval(*s.cond, scope).Truthy()) continue;
      CheckItems(items.size() + 1, s.line);
      items.push_back(std::move(item));
    }
    kept.emplace(Value(std::move(items)), s.line);
  }
  Cursor& items = kept ? *kept : all;
  const int64_t n = items.size();
  Value cur, next;
  if (n == 0 || !items.Next(&next)) {
    Exec(s.else_body, frame, out);
    return;
  }
  auto index = std::make_shared<int64_t>(0);
  const Value cycle = Value::Callable("cycle", [index](Interpreter&, CallArgs& a) {
    if (a.positional.empty()) throw Error("loop.cycle() needs at least one value");
    return a.positional[static_cast<size_t>(*index) % a.positional.size()];
  });
  for (int64_t i = 0; i < n; ++i) {
    Tick(s.line);
    *index = i;
    Value prev = std::move(cur);
    cur = std::move(next);
    next = Value();
    if (i + 1 < n) items.Next(&next);
    // A new dict each step (its depth is its items'), the one before freed as it is replaced.
    Dict loop;
    loop.Reserve(10);
    loop.Set("index", Value(i + 1));
    loop.Set("index0", Value(i));
    loop.Set("revindex", Value(n - i));
    loop.Set("revindex0", Value(n - i - 1));
    loop.Set("first", Value(i == 0));
    loop.Set("last", Value(i == n - 1));
    loop.Set("length", Value(n));
    loop.Set("previtem", std::move(prev));
    loop.Set("nextitem", next);
    loop.Set("cycle", cycle);
    scope->vars.Set("loop", Value(std::move(loop)));
    Bind(s.targets, cur, scope.get(), s.line);
    if (Exec(s.body, scope, out) == Flow::kBreak) break;
    CheckSize(out->size(), s.line);
  }
}

void Interpreter::ExecSet(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  Value v;
  if (s.expr) {
    v = Eval(*s.expr, frame);
  } else {
    std::string body;
    Exec(s.body, frame, &body);
    v = Value(std::move(body));
  }
  if (!s.text.empty()) {
    Value ns = Lookup(s.targets[0], *frame);
    if (!ns.is_namespace()) {
      throw Error("cannot assign attribute '" + s.text + "' of '" + s.targets[0] +
                      "': not a namespace() object",
                  s.line);
    }
    ns.SetAttr(s.text, std::move(v));
    return;
  }
  Bind(s.targets, v, frame.get(), s.line);
}

Value Interpreter::MakeMacro(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  const Stmt* self = &s;
  std::weak_ptr<Frame> weak = frame;  // weak: the frame holds the macro
  return Value::Callable(s.text, [this, self, weak](Interpreter&, CallArgs& a) {
    auto f = std::make_shared<Frame>();
    f->parent = weak.lock();
    if (!f->parent) f->parent = root_;
    if (a.positional.size() > self->params.size()) {
      throw Error("macro '" + self->text + "' takes " + std::to_string(self->params.size()) +
                      " arguments, got " + std::to_string(a.positional.size()),
                  a.line);
    }
    for (const auto& [k, v] : a.keyword) {
      bool known = k == "caller";
      for (const Param& p : self->params) known = known || p.name == k;
      if (!known) throw Error("macro '" + self->text + "' has no argument '" + k + "'", a.line);
      if (k == "caller") f->vars.Set("caller", v);
    }
    for (size_t i = 0; i < self->params.size(); ++i) {
      const Param& p = self->params[i];
      const Value* v = a.Get(i, p.name);
      f->vars.Set(p.name, v ? *v : p.default_value ? Eval(*p.default_value, f) : Value());
    }
    std::string body;
    Exec(self->body, f, &body);
    return Value(std::move(body));
  });
}

Value Interpreter::Lookup(std::string_view name, const Frame& frame) const {
  for (const Frame* f = &frame; f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->vars.Find(name)) return *v;
  }
  return Value();
}

Value Interpreter::Call(const Value& fn, CallArgs& args) {
  if (!fn.is_callable()) {
    throw Error("'" + std::string(fn.TypeName()) + "' object is not callable", args.line);
  }
  Tick(args.line);
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    throw Error("calls nest more than " + std::to_string(limits_.max_call_depth) +
                    " deep (runaway recursion?)",
                args.line);
  }
  struct Unwind {
    int* depth;
    ~Unwind() { --*depth; }
  } unwind{&call_depth_};
  return fn.function()(*this, args);
}

CallArgs Interpreter::EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Frame>& frame) {
  CallArgs a;
  a.line = e.line;
  for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, Eval(*v, frame));
  return a;
}

Value Interpreter::Eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Deeper deeper(this, e.line);
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return Lookup(e.name, *frame);
    case ExprKind::kList: {
      List l;
      for (const auto& a : e.args) l.push_back(Eval(*a, frame));
      return Value(std::move(l));
    }
    case ExprKind::kDict: {
      Dict d;
      for (const auto& [k, v] : e.pairs) {
        Value key = Eval(*k, frame);
        if (!key.is_string()) throw Error("dict keys must be strings in templates", e.line);
        d.Set(key.str(), Eval(*v, frame));
      }
      return Value(std::move(d));
    }
    case ExprKind::kGetAttr: {
      Value obj = Eval(*e.args[0], frame);
      if (obj.is_undefined()) {
        throw Error("cannot read attribute '" + e.name + "' of an undefined value", e.line);
      }
      if (obj.is_dict() && !obj.is_namespace()) {
        if (std::optional<Value> m = BindMethod(obj, e.name)) return *m;
      }
      if (obj.is_dict()) return GetItem(obj, Value(e.name));
      if (std::optional<Value> m = BindMethod(obj, e.name)) return *m;
      return Value();
    }
    case ExprKind::kGetItem: {
      Value obj = Eval(*e.args[0], frame);
      Value key = Eval(*e.args[1], frame);
      if (obj.is_string()) Charge(obj.str().size(), e.line);  // found by walking code points
      if (obj.is_undefined()) {
        throw Error("cannot read item " + key.ShortRepr() + " of an undefined value", e.line);
      }
      if (obj.is_dict() && key.is_string() && obj.dict().Find(key.str()) == nullptr) {
        if (std::optional<Value> m = BindMethod(obj, key.str())) return *m;
      }
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      Value obj = Eval(*e.args[0], frame);
      auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i], frame) : Value(); };
      Value result = Slice(obj, part(1), part(2), part(3), e.line);
      Charge(Footprint(obj) + Footprint(result), e.line);
      return result;
    }
    case ExprKind::kCall:
      return EvalCall(e, frame);
    case ExprKind::kFilter: {
      Value operand = e.args[0] ? Eval(*e.args[0], frame) : Value();
      CallArgs args = EvalArgs(e, 1, frame);
      try {
        Value result = ApplyFilter(*this, e.name, operand, args);
        Charge(Footprint(operand) + Footprint(result), e.line);
        return result;
      } catch (Error& err) {
        if (err.line() == 0) err.set_line(e.line);
        throw;
      }
    }
    case ExprKind::kTest: {
      Value operand = Eval(*e.args[0], frame);
      CallArgs args = EvalArgs(e, 1, frame);
      bool r = false;
      try {
        r = ApplyTest(*this, e.name, operand, args);
      } catch (Error& err) {
        if (err.line() == 0) err.set_line(e.line);
        throw;
      }
      return Value(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      Value v = Eval(*e.args[0], frame);
      if (e.name == "not") return Value(!v.Truthy());
      if (!v.is_number() && !v.is_bool()) {
        throw Error("bad operand type for unary " + e.name + ": '" + std::string(v.TypeName()) +
                        "'",
                    e.line);
      }
      if (e.name == "+") return v;
      if (v.is_float()) return Value(-v.float_value());
      const int64_t i = v.is_bool() ? int64_t{v.bool_value()} : v.int_value();
      if (i == INT64_MIN) throw Error("integer overflow", e.line);
      return Value(-i);
    }
    case ExprKind::kBinary:
      return EvalBinary(e, frame);
    case ExprKind::kCond:
      if (Eval(*e.args[0], frame).Truthy()) return Eval(*e.args[1], frame);
      return e.args[2] ? Eval(*e.args[2], frame) : Value();
  }
  return Value();
}

Value Interpreter::EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Value fn = Eval(*e.args[0], frame);
  CallArgs args = EvalArgs(e, 1, frame);
  if (!fn.is_callable()) {
    std::string what = e.args[0]->kind == ExprKind::kName      ? "'" + e.args[0]->name + "'"
                       : e.args[0]->kind == ExprKind::kGetAttr ? "'" + e.args[0]->name + "'"
                                                               : "the value";
    throw Error(what + (fn.is_undefined() ? " is undefined and cannot be called"
                                          : " is not callable"),
                e.line);
  }
  try {
    Value result = Call(fn, args);
    Charge(Footprint(result), e.line);
    return result;
  } catch (Error& err) {
    if (err.line() == 0) err.set_line(e.line);
    throw;
  }
}

Value Interpreter::EvalBinary(const Expr& e, const std::shared_ptr<Frame>& frame) {
  const std::string& op = e.name;
  Value a = Eval(*e.args[0], frame);
  if (op == "and") return a.Truthy() ? Eval(*e.args[1], frame) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.args[1], frame);
  Value b = Eval(*e.args[1], frame);
  const int line = e.line;
  Charge(Footprint(a) + Footprint(b), line);
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "~") {
    std::string s = Str(a);
    const std::string t = Str(b);
    CheckSize(s.size() + t.size(), line);
    Charge(s.size() + t.size(), line);
    s += t;
    return Value(std::move(s));
  }
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.is_string()) {
      if (!a.is_string()) BadOperands(op, a, b, line);
      r = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : b.list()) {
        if ((r = x.Equals(a))) break;
      }
    } else if (b.is_range()) {
      r = a.is_int() && b.range().Has(a.int_value());
    } else if (b.is_dict()) {
      r = a.is_string() && b.dict().Find(a.str()) != nullptr;
    } else if (b.is_undefined()) {
      r = false;
    } else {
      BadOperands(op, a, b, line);
    }
    return Value(op == "in" ? r : !r);
  }
  const bool nums = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  auto as_num = [](const Value& v) { return v.is_bool() ? Value(int64_t{v.bool_value()}) : v; };
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int c = 0;
    if (nums) {
      const double x = as_num(a).float_value(), y = as_num(b).float_value();
      c = x < y ? -1 : x > y ? 1 : 0;
      if (as_num(a).is_int() && as_num(b).is_int()) {
        c = a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
      }
    } else if (a.is_string() && b.is_string()) {
      c = a.str().compare(b.str());
    } else {
      BadOperands(op, a, b, line);
    }
    if (op == "<") return Value(c < 0);
    if (op == ">") return Value(c > 0);
    if (op == "<=") return Value(c <= 0);
    return Value(c >= 0);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      CheckSize(a.str().size() + b.str().size(), line);
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      CheckItems(a.list().size() + b.list().size(), line);
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& count = a.is_string() || a.is_list() ? b : a;
    if (!count.is_int()) BadOperands(op, a, b, line);
    const int64_t n = std::max<int64_t>(0, count.int_value());
    const size_t unit = seq.is_string() ? seq.str().size() : seq.list().size();
    size_t total = 0;
    if (__builtin_mul_overflow(unit, static_cast<uint64_t>(n), &total)) total = SIZE_MAX;
    if (n > 0 && seq.is_string()) CheckSize(total, line);
    if (n > 0 && seq.is_list()) CheckItems(total, line);
    Charge(seq.is_string() ? total : total * sizeof(Value), line);
    if (seq.is_string()) {
      std::string s;
      s.reserve(total);
      for (int64_t i = 0; i < n; ++i) s += seq.str();
      return Value(std::move(s));
    }
    List l;
    l.reserve(total);
    for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq.list().begin(), seq.list().end());
    return Value(std::move(l));
  }
  if (!nums) BadOperands(op, a, b, line);
  const Value x = as_num(a), y = as_num(b);
  const bool ints = x.is_int() && y.is_int();
  if (op == "/") {
    if (y.float_value() == 0) throw Error("division by zero", line);
    return Value(x.float_value() / y.float_value());
  }
  if (op == "//" || op == "%") {
    if (y.float_value() == 0) throw Error("integer division or modulo by zero", line);
    if (ints) {
      if (x.int_value() == INT64_MIN && y.int_value() == -1) throw Error("integer overflow", line);
      const int64_t q = FloorDiv(x.int_value(), y.int_value());
      return op == "//" ? Value(q) : Value(x.int_value() - q * y.int_value());
    }
    const double q = std::floor(x.float_value() / y.float_value());
    return op == "//" ? Value(q) : Value(x.float_value() - q * y.float_value());
  }
  if (op == "**") {
    if (ints && y.int_value() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < y.int_value(); ++i) {
        if (__builtin_mul_overflow(r, x.int_value(), &r)) throw Error("integer overflow", line);
        Tick(line);
      }
      return Value(r);
    }
    return Value(std::pow(x.float_value(), y.float_value()));
  }
  if (ints) {
    int64_t r = 0;
    bool overflow = op == "+"   ? __builtin_add_overflow(x.int_value(), y.int_value(), &r)
                    : op == "-" ? __builtin_sub_overflow(x.int_value(), y.int_value(), &r)
                                : __builtin_mul_overflow(x.int_value(), y.int_value(), &r);
    if (overflow) throw Error("integer overflow", line);
    return Value(r);
  }
  const double p = x.float_value(), q = y.float_value();
  return Value(op == "+" ? p + q : op == "-" ? p - q : p * q);
}

}  // namespace banyan::text::jinja
