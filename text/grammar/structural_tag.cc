#include "text/grammar/structural_tag.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan::text::grammar {

absl::StatusOr<Grammar> StructuralTagGrammar(const StructuralTag& tag,
                                             const JsonSchemaOptions& options) {
  if (tag.structures.empty()) {
    return absl::InvalidArgumentError("a structural tag needs at least one structure");
  }
  Grammar g;
  const int32_t root = g.AddRule("structure");
  std::vector<Expr> alts;
  alts.reserve(tag.structures.size());
  for (size_t i = 0; i < tag.structures.size(); ++i) {
    const TagStructure& s = tag.structures[i];
    absl::StatusOr<int32_t> value = AddJsonSchemaRules(s.schema, options, &g);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("structures[", i, "].schema: ", value.status().message()));
    }
    alts.push_back(Seq({Literal(s.begin), Ref(*value), Literal(s.end)}));
  }
  g.SetBody(root, Alt(std::move(alts)));
  g.set_root(root);
  return g;
}

}  // namespace banyan::text::grammar
