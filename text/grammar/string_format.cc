#include "text/grammar/string_format.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace banyan::text::grammar {
namespace {

Expr Digit() { return Byte(ByteSet::Range('0', '9')); }
Expr Chars(std::string_view set) { return Byte(ByteSet::Chars(set)); }
Expr Hex() {
  ByteSet s = ByteSet::Range('0', '9');
  s.AddRange('a', 'f');
  s.AddRange('A', 'F');
  return Byte(s);
}

Expr TwoDigits(char lo_tens, char hi_tens, char last_hi) {
  // lo_tens0..hi_tens9 with the last tens digit limited to 0..last_hi.
  std::vector<Expr> alts;
  if (hi_tens > lo_tens) {
    alts.push_back(Seq({Byte(ByteSet::Range(lo_tens, hi_tens - 1)), Digit()}));
  }
  alts.push_back(Seq({Literal(std::string(1, hi_tens)), Byte(ByteSet::Range('0', last_hi))}));
  return Alt(std::move(alts));
}

}  // namespace

absl::StatusOr<Expr> StringFormatExpr(const std::string& format, const std::string& path) {
  const Expr year = Repeat(Digit(), 4, 4);
  const Expr day28 = Alt({Seq({Literal("0"), Byte(ByteSet::Range('1', '9'))}),
                          Seq({Literal("1"), Digit()}),
                          Seq({Literal("2"), Byte(ByteSet::Range('0', '8'))})});
  const Expr day30 = Alt({day28, Literal("29"), Literal("30")});
  const Expr day31 = Alt({day30, Literal("31")});
  const Expr date = Seq({year, Literal("-"),
                         Alt({Seq({Literal("02-"), day28}),
                              Seq({Alt({Literal("04"), Literal("06"), Literal("09"),
                                        Literal("11")}),
                                   Literal("-"), day30}),
                              Seq({Alt({Literal("01"), Literal("03"), Literal("05"),
                                        Literal("07"), Literal("08"), Literal("10"),
                                        Literal("12")}),
                                   Literal("-"), day31})})});
  const Expr hour = TwoDigits('0', '2', '3');
  const Expr minute = Seq({Byte(ByteSet::Range('0', '5')), Digit()});
  const Expr time = Seq({hour, Literal(":"), minute, Literal(":"), minute,
                         Opt(Seq({Literal("."), Repeat(Digit(), 1, 6)})),
                         Alt({Literal("Z"), Seq({Chars("+-"), hour, Literal(":"), minute})})});
  auto quoted = [](Expr e) { return Seq({Literal("\""), std::move(e), Literal("\"")}); };
  if (format == "date") return quoted(date);
  if (format == "time") return quoted(time);
  if (format == "date-time") return quoted(Seq({date, Literal("T"), time}));
  if (format == "uuid") {
    auto hex = [](int n) { return Repeat(Hex(), n, n); };
    return quoted(Seq({hex(8), Literal("-"), hex(4), Literal("-"), hex(4), Literal("-"),
                       hex(4), Literal("-"), hex(12)}));
  }
  if (format == "ipv4") {
    const Expr octet = Alt({Seq({Literal("25"), Byte(ByteSet::Range('0', '5'))}),
                            Seq({Literal("2"), Byte(ByteSet::Range('0', '4')), Digit()}),
                            Seq({Literal("1"), Digit(), Digit()}),
                            Seq({Byte(ByteSet::Range('1', '9')), Digit()}), Digit()});
    return quoted(Seq({octet, Literal("."), octet, Literal("."), octet, Literal("."), octet}));
  }
  if (format == "email") {
    // The subset the header states: what both the strict and the fast checks pass.
    ByteSet alnum = ByteSet::Range('a', 'z');
    alnum.AddRange('A', 'Z');
    alnum.AddRange('0', '9');
    ByteSet atext = ByteSet::Chars("!#$%&'*+/=?^_`{|}~-");
    atext.AddRange('a', 'z');
    atext.AddRange('A', 'Z');
    atext.AddRange('0', '9');
    ByteSet inner = alnum;
    inner.Add('-');
    const Expr atom = Plus(Byte(atext));
    const Expr label =
        Seq({Byte(alnum), Opt(Seq({Repeat(Byte(inner), 0, 61), Byte(alnum)}))});
    return quoted(Seq({atom, Star(Seq({Literal("."), atom})), Literal("@"),
                       Plus(Seq({label, Literal(".")})), label}));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported string format '", format, "' at ", path,
                   " (supported: date, time, date-time, uuid, ipv4, email)"));
}

}  // namespace banyan::text::grammar
