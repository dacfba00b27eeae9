#include "text/grammar/grammar.h"

#include <utility>

namespace banyan::text::grammar {

Expr Empty() { return Expr{}; }

Expr Byte(ByteSet bytes) {
  Expr e;
  e.kind = Expr::Kind::kByte;
  e.bytes = bytes;
  return e;
}

Expr Literal(std::string_view text) {
  if (text.empty()) return Empty();
  if (text.size() == 1) return Byte(ByteSet::Of(static_cast<uint8_t>(text[0])));
  std::vector<Expr> kids;
  kids.reserve(text.size());
  for (char c : text) kids.push_back(Byte(ByteSet::Of(static_cast<uint8_t>(c))));
  return Seq(std::move(kids));
}

Expr Ref(int32_t rule) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.rule = rule;
  return e;
}

Expr Seq(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = kids.empty() ? Expr::Kind::kEmpty : Expr::Kind::kSeq;
  e.kids = std::move(kids);
  return e;
}

Expr Alt(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.kids = std::move(kids);
  return e;
}

Expr Repeat(Expr kid, int32_t min, int32_t max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.kids.push_back(std::move(kid));
  return e;
}

Expr Dfa(std::shared_ptr<const ByteDfa> dfa) {
  Expr e;
  e.kind = Expr::Kind::kDfa;
  e.dfa = std::move(dfa);
  return e;
}

Expr Utf8Char(const ByteSet& excluded_ascii) {
  ByteSet ascii = ByteSet::Range(0x00, 0x7F);
  for (int b = 0; b < 0x80; ++b) {
    if (excluded_ascii.Contains(static_cast<uint8_t>(b))) ascii.Remove(static_cast<uint8_t>(b));
  }
  const ByteSet cont = ByteSet::Range(0x80, 0xBF);
  auto seq = [](std::vector<ByteSet> sets) {
    std::vector<Expr> kids;
    for (const ByteSet& s : sets) kids.push_back(Byte(s));
    return Seq(std::move(kids));
  };
  // The well-formed UTF-8 byte sequences (Unicode 15, table 3-7).
  return Alt({Byte(ascii), seq({ByteSet::Range(0xC2, 0xDF), cont}),
              seq({ByteSet::Of(0xE0), ByteSet::Range(0xA0, 0xBF), cont}),
              seq({ByteSet::Range(0xE1, 0xEC), cont, cont}),
              seq({ByteSet::Of(0xED), ByteSet::Range(0x80, 0x9F), cont}),
              seq({ByteSet::Range(0xEE, 0xEF), cont, cont}),
              seq({ByteSet::Of(0xF0), ByteSet::Range(0x90, 0xBF), cont, cont}),
              seq({ByteSet::Range(0xF1, 0xF3), cont, cont, cont}),
              seq({ByteSet::Of(0xF4), ByteSet::Range(0x80, 0x8F), cont, cont})});
}

int32_t Grammar::AddRule(std::string name) {
  rules_.push_back(Rule{std::move(name), Expr{}, false});
  return static_cast<int32_t>(rules_.size()) - 1;
}

void Grammar::SetBody(int32_t rule, Expr body) {
  rules_[rule].body = std::move(body);
  rules_[rule].defined = true;
}

int32_t Grammar::AddRule(std::string name, Expr body) {
  const int32_t id = AddRule(std::move(name));
  SetBody(id, std::move(body));
  return id;
}

}  // namespace banyan::text::grammar
