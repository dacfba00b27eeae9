#include "text/jinja/parser.h"

#include <initializer_list>
#include <string_view>

#include "text/jinja/builtins.h"

namespace banyan::text::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    std::string_view end;
    Body body = ParseBody({}, &end);
    return body;
  }

 private:
  // Depth guard for recursion over nested expressions and blocks.
  struct Nest {
    explicit Nest(Parser* p) : p(p) {
      if (++p->depth_ > kMaxNesting) throw Error("the template nests too deeply", p->Line());
    }
    ~Nest() { --p->depth_; }
    Parser* p;
  };
  // The same for a loop that builds a left-leaning chain (a + b + c, x | f | g, x.a.b): the
  // tree is as deep as the chain is long, and the interpreter recurses over it.
  struct Chain {
    explicit Chain(Parser* p) : p(p) {}
    void Deeper() {
      ++links;
      if (++p->depth_ > kMaxNesting) throw Error("the template nests too deeply", p->Line());
    }
    ~Chain() { p->depth_ -= links; }
    Parser* p;
    int links = 0;
  };

  const Token& Cur() const { return t_[pos_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  int Line() const { return Cur().line; }
  void Next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == TokenType::kName && Cur().text == n; }
  bool AcceptOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(std::string_view n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    std::string got = Cur().type == TokenType::kEnd        ? "end of template"
                      : Cur().type == TokenType::kBlockEnd ? "'%}'"
                      : Cur().type == TokenType::kExprEnd  ? "'}}'"
                                                           : "'" + Cur().text + "'";
    throw Error("expected " + what + ", got " + got, Line());
  }
  void ExpectOp(std::string_view op) {
    if (!AcceptOp(op)) Fail("'" + std::string(op) + "'");
  }
  std::string ExpectName() {
    if (Cur().type != TokenType::kName) Fail("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) Fail("'%}'");
    Next();
  }

  static ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Statements up to a block whose keyword is in `ends` (consumed up to the keyword; *end set).
  Body ParseBody(std::initializer_list<std::string_view> ends, std::string_view* end) {
    Nest nest(this);
    Body body;
    for (;;) {
      const Token& tok = Cur();
      if (tok.type == TokenType::kEnd) {
        if (ends.size() == 0) return body;
        throw Error("unexpected end of template: a block is not closed (expected '" +
                        std::string(*ends.begin()) + "')",
                    tok.line);
      }
      if (tok.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        Next();
      } else if (tok.type == TokenType::kExprBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        s->expr = ParseExpression();
        if (Cur().type != TokenType::kExprEnd) Fail("'}}'");
        Next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type != TokenType::kName) Fail("a statement name");
        const std::string kw = Cur().text;
        for (std::string_view e : ends) {
          if (kw == e) {
            *end = e;
            Next();
            return body;
          }
        }
        if (std::unique_ptr<Stmt> s = ParseStatement(kw)) body.push_back(std::move(s));
      } else {
        Fail("template text or a tag");
      }
    }
  }

  std::unique_ptr<Stmt> ParseStatement(const std::string& kw) {
    const int line = Line();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    Next();
    std::string_view end;
    if (kw == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr cond = ParseExpression();
      ExpectBlockEnd();
      for (;;) {
        Body b = ParseBody({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = ParseExpression();
          ExpectBlockEnd();
          continue;
        }
        ExpectBlockEnd();
        if (end == "else") {
          s->else_body = ParseBody({"endif"}, &end);
          ExpectBlockEnd();
        }
        return s;
      }
    }
    if (kw == "for") {
      s->kind = StmtKind::kFor;
      s->targets.push_back(ExpectName());
      while (AcceptOp(",")) s->targets.push_back(ExpectName());
      if (!AcceptName("in")) Fail("'in'");
      s->expr = ParseExpression(/*with_condition=*/false);
      if (AcceptName("if")) s->cond = ParseExpression(false);
      if (AcceptName("recursive")) throw Error("recursive for loops are not supported", line);
      ExpectBlockEnd();
      s->body = ParseBody({"else", "endfor"}, &end);
      ExpectBlockEnd();
      if (end == "else") {
        s->else_body = ParseBody({"endfor"}, &end);
        ExpectBlockEnd();
      }
      return s;
    }
    if (kw == "set") {
      s->kind = StmtKind::kSet;
      s->targets.push_back(ExpectName());
      if (AcceptOp(".")) {
        s->text = ExpectName();
      } else {
        while (AcceptOp(",")) s->targets.push_back(ExpectName());
      }
      if (AcceptOp("=")) {
        s->expr = ParseExpression();
        ExpectBlockEnd();
        return s;
      }
      if (!s->text.empty() || s->targets.size() != 1) Fail("'='");
      ExpectBlockEnd();
      s->body = ParseBody({"endset"}, &end);
      ExpectBlockEnd();
      return s;
    }
    if (kw == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = ExpectName();
      ParseParams(&s->params);
      ExpectBlockEnd();
      s->body = ParseBody({"endmacro"}, &end);
      if (Cur().type == TokenType::kName) Next();  // {% endmacro name %}
      ExpectBlockEnd();
      return s;
    }
    if (kw == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) ParseParams(&s->params);
      s->expr = ParseExpression();
      if (s->expr->kind != ExprKind::kCall) throw Error("{% call %} needs a macro call", line);
      ExpectBlockEnd();
      s->body = ParseBody({"endcall"}, &end);
      ExpectBlockEnd();
      return s;
    }
    if (kw == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = ParseFilter(Make(ExprKind::kLiteral, line));
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"}, &end);
      ExpectBlockEnd();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      ExpectBlockEnd();
      return s;
    }
    if (kw == "generation" || kw == "endgeneration") {  // transformers' assistant-mask markers
      ExpectBlockEnd();
      return nullptr;
    }
    throw Error("unknown statement '" + kw + "'", line);
  }

  void ParseParams(std::vector<Param>* params) {
    ExpectOp("(");
    while (!AcceptOp(")")) {
      Param p;
      p.name = ExpectName();
      if (AcceptOp("=")) p.default_value = ParseExpression();
      params->push_back(std::move(p));
      if (!IsOp(")")) ExpectOp(",");
    }
  }

  // ---- expressions ----

  ExprPtr ParseExpression(bool with_condition = true) {
    Nest nest(this);
    Chain chain(this);
    ExprPtr e = ParseOr();
    if (!with_condition) return e;
    while (IsName("if")) {
      chain.Deeper();
      const int line = Line();
      Next();
      auto c = Make(ExprKind::kCond, line);
      c->args.push_back(ParseOr());
      c->args.push_back(std::move(e));
      c->args.push_back(AcceptName("else") ? ParseExpression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto e = Make(ExprKind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr ParseOr() {
    Chain chain(this);
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      chain.Deeper();
      const int line = Line();
      Next();
      e = Binary("or", std::move(e), ParseAnd(), line);
    }
    return e;
  }

  ExprPtr ParseAnd() {
    Chain chain(this);
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      chain.Deeper();
      const int line = Line();
      Next();
      e = Binary("and", std::move(e), ParseNot(), line);
    }
    return e;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      const int line = Line();
      Next();
      auto e = Make(ExprKind::kUnary, line);
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    Chain chain(this);
    ExprPtr e = ParseMath1();
    for (;;) {
      const int line = Line();
      std::string op;
      if (Cur().type == TokenType::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        return e;
      }
      chain.Deeper();
      e = Binary(op, std::move(e), ParseMath1(), line);
    }
  }

  ExprPtr ParseMath1() {
    Chain chain(this);
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      chain.Deeper();
      const std::string op = Cur().text;
      const int line = Line();
      Next();
      e = Binary(op, std::move(e), ParseConcat(), line);
    }
    return e;
  }

  ExprPtr ParseConcat() {
    Chain chain(this);
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      chain.Deeper();
      const int line = Line();
      Next();
      e = Binary("~", std::move(e), ParseMath2(), line);
    }
    return e;
  }

  ExprPtr ParseMath2() {
    Chain chain(this);
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      chain.Deeper();
      const std::string op = Cur().text;
      const int line = Line();
      Next();
      e = Binary(op, std::move(e), ParsePow(), line);
    }
    return e;
  }

  ExprPtr ParsePow() {
    Chain chain(this);
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      chain.Deeper();
      const int line = Line();
      Next();
      e = Binary("**", std::move(e), ParseUnary(true), line);
    }
    return e;
  }

  ExprPtr ParseUnary(bool with_filter) {
    Nest nest(this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      e = Make(ExprKind::kUnary, Line());
      e->name = Cur().text;
      Next();
      e->args.push_back(ParseUnary(false));
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    if (!with_filter) return e;
    Chain chain(this);
    for (;;) {
      chain.Deeper();
      if (IsOp("|")) {
        Next();
        e = ParseFilter(std::move(e));
      } else if (IsName("is")) {
        Next();
        e = ParseTest(std::move(e));
      } else {
        return e;
      }
    }
  }

  // operand | name(args) | name2(args) ...
  ExprPtr ParseFilter(ExprPtr operand) {
    Chain chain(this);
    for (;;) {
      chain.Deeper();
      const int line = Line();
      auto f = Make(ExprKind::kFilter, line);
      f->name = ExpectName();
      while (AcceptOp(".")) {  // (not `"." + ExpectName()`: GCC 12 -O3 warns -Wrestrict there)
        f->name += '.';
        f->name += ExpectName();
      }
      // Python's Jinja refuses unknown filters when it compiles a template; so do we.
      if (!IsFilter(f->name)) throw Error("unknown filter '" + f->name + "'", line);
      f->args.push_back(std::move(operand));
      if (IsOp("(")) ParseCallArgs(f.get());
      CheckNamedInArgs(*f);
      operand = std::move(f);
      if (!AcceptOp("|")) return operand;
    }
  }

  // map('upper'), select('even'), selectattr('x', 'defined'): a filter or test named by a
  // string literal is checked as well.
  static void CheckNamedInArgs(const Expr& f) {
    const bool map = f.name == "map" && f.kwargs.empty();
    const size_t at = f.name == "selectattr" || f.name == "rejectattr" ? 2 : 1;
    if (!map && f.name != "select" && f.name != "reject" && at != 2) return;
    if (f.args.size() <= at || f.args[at]->kind != ExprKind::kLiteral ||
        !f.args[at]->literal.is_string()) {
      return;
    }
    const std::string& name = f.args[at]->literal.str();
    if (map ? !IsFilter(name) : !IsTest(name)) {
      throw Error(std::string(map ? "unknown filter '" : "unknown test '") + name + "'", f.line);
    }
  }

  ExprPtr ParseTest(ExprPtr operand) {
    auto t = Make(ExprKind::kTest, Line());
    t->negated = AcceptName("not");
    if (IsName("none") || IsName("true") || IsName("false")) {
      t->name = Cur().text;  // keywords that name tests
      Next();
    } else {
      t->name = ExpectName();
    }
    if (!IsTest(t->name)) throw Error("unknown test '" + t->name + "'", t->line);
    t->args.push_back(std::move(operand));
    if (IsOp("(")) {
      ParseCallArgs(t.get());
    } else if ((Cur().type == TokenType::kString || Cur().type == TokenType::kInt ||
                Cur().type == TokenType::kFloat ||
                (Cur().type == TokenType::kName && !IsName("else") && !IsName("or") &&
                 !IsName("and") && !IsName("if") && !IsName("in") && !IsName("not") &&
                 !IsName("is")) ||
                IsOp("[") || IsOp("{"))) {
      t->args.push_back(ParsePostfix(ParsePrimary()));
    }
    return t;
  }

  void ParseCallArgs(Expr* call) {
    ExpectOp("(");
    while (!AcceptOp(")")) {
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        call->kwargs.emplace_back(std::move(key), ParseExpression());
      } else {
        if (!call->kwargs.empty()) {
          throw Error("a positional argument follows a keyword argument", Line());
        }
        call->args.push_back(ParseExpression());
      }
      if (!IsOp(")")) ExpectOp(",");
    }
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    Chain chain(this);
    for (;;) {
      chain.Deeper();
      const int line = Line();
      if (AcceptOp(".")) {
        auto g = Make(ExprKind::kGetAttr, line);
        if (Cur().type == TokenType::kInt) {  // x.0 is x[0]
          g->kind = ExprKind::kGetItem;
          g->args.push_back(std::move(e));
          auto idx = Make(ExprKind::kLiteral, line);
          idx->literal = Value(static_cast<int64_t>(std::stoll(Cur().text)));
          Next();
          g->args.push_back(std::move(idx));
        } else {
          g->name = ExpectName();
          g->args.push_back(std::move(e));
        }
        e = std::move(g);
      } else if (AcceptOp("[")) {
        e = ParseSubscript(std::move(e), line);
      } else if (IsOp("(")) {
        auto c = Make(ExprKind::kCall, line);
        c->args.push_back(std::move(e));
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr obj, int line) {
    Nest nest(this);
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (IsOp("]")) break;
      if (IsOp(":")) {
        if (++colons > 2) Fail("']'");
        Next();
        continue;
      }
      if (parts[colons]) Fail("':' or ']'");
      parts[colons] = ParseExpression();
    }
    Next();
    if (colons == 0) {
      if (!parts[0]) throw Error("empty subscript", line);
      auto g = Make(ExprKind::kGetItem, line);
      g->args.push_back(std::move(obj));
      g->args.push_back(std::move(parts[0]));
      return g;
    }
    auto s = Make(ExprKind::kSlice, line);
    s->args.push_back(std::move(obj));
    for (ExprPtr& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  ExprPtr ParsePrimary() {
    Nest nest(this);
    const Token& tok = Cur();
    const int line = tok.line;
    auto lit = [&](Value v) {
      auto e = Make(ExprKind::kLiteral, line);
      e->literal = std::move(v);
      return e;
    };
    switch (tok.type) {
      case TokenType::kName: {
        const std::string n = tok.text;
        Next();
        if (n == "true" || n == "True") return lit(Value(true));
        if (n == "false" || n == "False") return lit(Value(false));
        if (n == "none" || n == "None") return lit(Value::None());
        auto e = Make(ExprKind::kName, line);
        e->name = n;
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (Cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += Cur().text;
          Next();
        }
        return lit(Value(std::move(s)));
      }
      case TokenType::kInt: {
        int64_t v = 0;
        try {
          v = std::stoll(tok.text);
        } catch (const std::exception&) {
          throw Error("integer literal out of range: " + tok.text, line);
        }
        Next();
        return lit(Value(v));
      }
      case TokenType::kFloat: {
        const double v = std::stod(tok.text);
        Next();
        return lit(Value(v));
      }
      case TokenType::kOp:
        if (AcceptOp("(")) {
          if (AcceptOp(")")) return Make(ExprKind::kList, line);  // the empty tuple
          ExprPtr first = ParseExpression();
          if (AcceptOp(")")) return first;
          auto tuple = Make(ExprKind::kList, line);
          tuple->args.push_back(std::move(first));
          while (AcceptOp(",")) {
            if (IsOp(")")) break;
            tuple->args.push_back(ParseExpression());
          }
          ExpectOp(")");
          return tuple;
        }
        if (AcceptOp("[")) {
          auto list = Make(ExprKind::kList, line);
          while (!AcceptOp("]")) {
            list->args.push_back(ParseExpression());
            if (!IsOp("]")) ExpectOp(",");
          }
          return list;
        }
        if (AcceptOp("{")) {
          auto dict = Make(ExprKind::kDict, line);
          while (!AcceptOp("}")) {
            ExprPtr key = ParseExpression();
            ExpectOp(":");
            dict->pairs.emplace_back(std::move(key), ParseExpression());
            if (!IsOp("}")) ExpectOp(",");
          }
          return dict;
        }
        break;
      default:
        break;
    }
    Fail("an expression");
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace banyan::text::jinja
