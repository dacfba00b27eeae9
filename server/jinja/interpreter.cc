#include "server/jinja/interpreter.h"

#include <climits>
#include <cmath>
#include <cstdint>

#include "server/jinja/builtins.h"

namespace banyan::jinja {
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
  if (obj.is_list() && (key.is_int() || key.is_bool())) {
    int64_t i = ToIndex(key, 0);
    const int64_t n = static_cast<int64_t>(obj.list().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return obj.list()[static_cast<size_t>(i)];
  }
  if (obj.is_string() && (key.is_int() || key.is_bool())) {
    const std::vector<size_t> off = Utf8Offsets(obj.str());
    int64_t i = ToIndex(key, 0);
    const int64_t n = static_cast<int64_t>(off.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return Value(obj.str().substr(off[static_cast<size_t>(i)], off[static_cast<size_t>(i) + 1] -
                                                                   off[static_cast<size_t>(i)]));
  }
  return Value();
}

Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v,
            int line) {
  auto opt = [&](const Value& v, int64_t dflt) {
    return v.is_undefined() || v.is_none() ? dflt : ToIndex(v, line);
  };
  std::vector<size_t> off;
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    off = Utf8Offsets(obj.str());
    n = static_cast<int64_t>(off.size()) - 1;
  } else {
    throw Error("cannot slice a value of type " + std::string(obj.TypeName()), line);
  }
  const int64_t step = opt(step_v, 1);
  if (step == 0) throw Error("slice step cannot be zero", line);
  auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t start = step > 0 ? opt(start_v, 0) : opt(start_v, n - 1);
  int64_t stop = step > 0 ? opt(stop_v, n) : opt(stop_v, -n - 1);
  start = clamp(start, true);
  stop = clamp(stop, false);
  std::vector<int64_t> idx;  // wide counter: start + step may pass int64's range
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    idx.push_back(static_cast<int64_t>(i));
  }
  if (obj.is_list()) {
    List out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  std::string out;
  for (int64_t i : idx) {
    const size_t a = off[static_cast<size_t>(i)];
    out.append(obj.str(), a, off[static_cast<size_t>(i) + 1] - a);
  }
  return Value(std::move(out));
}

List Iterate(const Value& v, int line) {
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, unused] : v.dict().items()) keys.push_back(Value(k));
    return keys;
  }
  if (v.is_string()) {
    const std::vector<size_t> off = Utf8Offsets(v.str());
    List chars;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      chars.push_back(Value(v.str().substr(off[i], off[i + 1] - off[i])));
    }
    return chars;
  }
  if (v.is_undefined()) return {};  // Jinja iterates an undefined value as empty
  throw Error("'" + std::string(v.TypeName()) + "' object is not iterable", line);
}

std::string Interpreter::Run(const Body& body, Dict globals) {
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
  try {
    switch (s.kind) {
      case StmtKind::kText:
        out->append(s.text);
        break;
      case StmtKind::kOutput:
        out->append(Eval(*s.expr, frame).ToString());
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
        out->append(Call(fn, args).ToString());
        break;
      }
      case StmtKind::kFilterBlock: {
        std::string body;
        Exec(s.body, frame, &body);
        const Expr& f = *s.expr;
        CallArgs args = EvalArgs(f, 1, frame);
        out->append(ApplyFilter(*this, f.name, Value(std::move(body)), args).ToString());
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

void Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out) {
  auto scope = std::make_shared<Frame>();
  scope->parent = frame;
  const List all = Iterate(Eval(*s.expr, frame), s.line);
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      scope->vars.Set(s.targets[0], item);
      return;
    }
    const List parts = Iterate(item, s.line);
    if (parts.size() != s.targets.size()) {
      throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                      std::to_string(s.targets.size()) + " loop variables",
                  s.line);
    }
    for (size_t i = 0; i < parts.size(); ++i) scope->vars.Set(s.targets[i], parts[i]);
  };
  List items;
  if (s.cond) {
    for (const Value& item : all) {
      Tick(s.line);
      bind(item);
      if (Eval(*s.cond, scope).Truthy()) items.push_back(item);
    }
  } else {
    items = all;
  }
  if (items.empty()) {
    Exec(s.else_body, frame, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Tick(s.line);
    Dict loop;
    loop.Set("index", Value(i + 1));
    loop.Set("index0", Value(i));
    loop.Set("revindex", Value(n - i));
    loop.Set("revindex0", Value(n - i - 1));
    loop.Set("first", Value(i == 0));
    loop.Set("last", Value(i == n - 1));
    loop.Set("length", Value(n));
    loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
    loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
    loop.Set("cycle", Value::Callable("cycle", [i](Interpreter&, CallArgs& a) {
               if (a.positional.empty()) throw Error("loop.cycle() needs at least one value");
               return a.positional[static_cast<size_t>(i) % a.positional.size()];
             }));
    scope->vars.Set("loop", Value(std::move(loop)));
    bind(items[static_cast<size_t>(i)]);
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
    ns.dict().Set(s.text, std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    frame->vars.Set(s.targets[0], std::move(v));
    return;
  }
  const List parts = Iterate(v, s.line);
  if (parts.size() != s.targets.size()) {
    throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                    std::to_string(s.targets.size()) + " names",
                s.line);
  }
  for (size_t i = 0; i < parts.size(); ++i) frame->vars.Set(s.targets[i], parts[i]);
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
      if (obj.is_undefined()) {
        throw Error("cannot read item " + key.Repr() + " of an undefined value", e.line);
      }
      if (obj.is_dict() && key.is_string() && obj.dict().Find(key.str()) == nullptr) {
        if (std::optional<Value> m = BindMethod(obj, key.str())) return *m;
      }
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      Value obj = Eval(*e.args[0], frame);
      auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i], frame) : Value(); };
      return Slice(obj, part(1), part(2), part(3), e.line);
    }
    case ExprKind::kCall:
      return EvalCall(e, frame);
    case ExprKind::kFilter: {
      Value operand = e.args[0] ? Eval(*e.args[0], frame) : Value();
      CallArgs args = EvalArgs(e, 1, frame);
      try {
        return ApplyFilter(*this, e.name, operand, args);
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
    return Call(fn, args);
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
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "~") {
    std::string s = a.ToString();
    std::string t = b.ToString();
    CheckSize(s.size() + t.size(), line);
    return Value(s + t);
  }
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.is_string()) {
      if (!a.is_string()) BadOperands(op, a, b, line);
      r = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : b.list()) r = r || x.Equals(a);
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
    if (n > 0) CheckSize(total, line);
    if (seq.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += seq.str();
      return Value(std::move(s));
    }
    List l;
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

}  // namespace banyan::jinja
