#include "text/tokenizer/hf_json_reader.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json_limits.h"

namespace banyan::text {
namespace {

using Json = nlohmann::json;

// The pre-tokenizer patterns of the models GGUF names (the same as their tokenizer.json files).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string TypeOf(const Json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("(no type)");
}

// Typed field access with defaults; a present field of the wrong type is an error.
absl::Status GetBool(const Json& j, const char* key, bool def, bool* out,
                     const std::string& where) {
  *out = def;
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_boolean()) return Bad(where, absl::StrCat("'", key, "' must be true or false"));
  *out = j[key].get<bool>();
  return absl::OkStatus();
}

absl::Status GetString(const Json& j, const char* key, std::string def, std::string* out,
                       const std::string& where) {
  *out = std::move(def);
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_string()) return Bad(where, absl::StrCat("'", key, "' must be a string"));
  *out = j[key].get<std::string>();
  return absl::OkStatus();
}

// A {"String": s} or {"Regex": r} pattern.
absl::Status GetPattern(const Json& j, std::string* pattern, bool* regex,
                        const std::string& where) {
  if (!j.contains("pattern") || !j["pattern"].is_object()) {
    return Bad(where, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const Json& p = j["pattern"];
  if (p.contains("String") && p["String"].is_string()) {
    *pattern = p["String"].get<std::string>();
    *regex = false;
  } else if (p.contains("Regex") && p["Regex"].is_string()) {
    *pattern = p["Regex"].get<std::string>();
    *regex = true;
  } else {
    return Bad(where, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
  }
  return absl::OkStatus();
}

absl::Status ReadNormalizer(const Json& j, BpeSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  const std::string where = absl::StrCat("normalizer ", type);
  using Kind = NormalizerStep::Kind;
  NormalizerStep step;
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return Bad(where, "'normalizers' must be an array");
    }
    for (const Json& n : j["normalizers"]) {
      if (absl::Status s = ReadNormalizer(n, spec); !s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    if (absl::Status s = GetString(j, "prepend", "", &step.pattern, where); !s.ok()) return s;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    if (absl::Status s = GetPattern(j, &step.pattern, &step.regex, where); !s.ok()) return s;
    if (absl::Status s = GetString(j, "content", "", &step.content, where); !s.ok()) return s;
  } else if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    if (absl::Status s = GetBool(j, "strip_left", true, &step.left, where); !s.ok()) return s;
    if (absl::Status s = GetBool(j, "strip_right", true, &step.right, where); !s.ok()) return s;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "normalizer '", type,
        "' is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, "
        "Lowercase, Strip)"));
  }
  spec->normalizers.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ReadPreTokenizer(const Json& j, BpeSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  const std::string where = absl::StrCat("pre_tokenizer ", type);
  using Kind = PreTokenizerStep::Kind;
  PreTokenizerStep step;
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return Bad(where, "'pretokenizers' must be an array");
    }
    for (const Json& p : j["pretokenizers"]) {
      if (absl::Status s = ReadPreTokenizer(p, spec); !s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "Split") {
    step.kind = Kind::kSplit;
    if (absl::Status s = GetPattern(j, &step.pattern, &step.regex, where); !s.ok()) return s;
    std::string behavior;
    if (absl::Status s = GetString(j, "behavior", "", &behavior, where); !s.ok()) return s;
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    bool known = false;
    for (const auto& [name, value] : kBehaviors) {
      if (behavior == name) {
        step.behavior = value;
        known = true;
      }
    }
    if (!known) {
      return Bad(where, absl::StrCat("behavior '", behavior,
                                     "' is not one of Removed, Isolated, MergedWithPrevious, "
                                     "MergedWithNext, Contiguous"));
    }
    if (absl::Status s = GetBool(j, "invert", false, &step.invert, where); !s.ok()) return s;
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    if (absl::Status s = GetBool(j, "add_prefix_space", true, &step.add_prefix_space, where);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = GetBool(j, "use_regex", true, &step.use_regex, where); !s.ok()) return s;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    if (absl::Status s = GetString(j, "replacement", "\xE2\x96\x81", &step.replacement, where);
        !s.ok()) {
      return s;
    }
    if (step.replacement.empty()) return Bad(where, "'replacement' is empty");
    std::string scheme;
    if (absl::Status s = GetString(j, "prepend_scheme", "", &scheme, where); !s.ok()) return s;
    if (scheme.empty()) {  // older files: add_prefix_space
      bool add_prefix_space = true;
      if (absl::Status s = GetBool(j, "add_prefix_space", true, &add_prefix_space, where);
          !s.ok()) {
        return s;
      }
      scheme = add_prefix_space ? "always" : "never";
    }
    if (scheme == "always") {
      step.prepend = PreTokenizerStep::Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = PreTokenizerStep::Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = PreTokenizerStep::Prepend::kNever;
    } else {
      return Bad(where, absl::StrCat("prepend_scheme '", scheme, "' is not always/first/never"));
    }
    if (absl::Status s = GetBool(j, "split", true, &step.split, where); !s.ok()) return s;
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    if (absl::Status s = GetBool(j, "individual_digits", false, &step.individual_digits, where);
        !s.ok()) {
      return s;
    }
  } else {
    return absl::UnimplementedError(
        absl::StrCat("pre_tokenizer '", type,
                     "' is not supported (supported: Sequence, Split, ByteLevel, Metaspace, "
                     "Digits)"));
  }
  spec->pre_tokenizers.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ReadDecoder(const Json& j, bool* fused, BpeSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  const std::string where = absl::StrCat("decoder ", type);
  BpeDecoderSpec& d = spec->decoder;
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return Bad(where, "'decoders' must be an array");
    }
    for (const Json& p : j["decoders"]) {
      if (absl::Status s = ReadDecoder(p, fused, spec); !s.ok()) return s;
    }
  } else if (type == "ByteLevel") {
    d.byte_level = true;
  } else if (type == "ByteFallback") {
    d.byte_fallback = true;
  } else if (type == "Fuse") {
    *fused = true;
  } else if (type == "Strip") {
    int64_t start = 0;
    int64_t stop = 0;
    if (j.contains("start") && j["start"].is_number_integer()) start = j["start"].get<int64_t>();
    if (j.contains("stop") && j["stop"].is_number_integer()) stop = j["stop"].get<int64_t>();
    if (absl::Status s = GetString(j, "content", " ", &d.strip_content, where); !s.ok()) return s;
    if (stop != 0 || start < 0 || start > 64 || !*fused) {
      return absl::UnimplementedError(absl::StrCat(
          where, ": only stripping leading characters after a Fuse decoder is supported (start ",
          start, ", stop ", stop, ")"));
    }
    d.strip_start = static_cast<int>(start);
  } else if (type == "Replace") {
    std::string pattern;
    std::string content;
    bool regex = false;
    if (absl::Status s = GetPattern(j, &pattern, &regex, where); !s.ok()) return s;
    if (regex) return absl::UnimplementedError(absl::StrCat(where, ": regex patterns"));
    if (absl::Status s = GetString(j, "content", "", &content, where); !s.ok()) return s;
    d.replacements.emplace_back(std::move(pattern), std::move(content));
  } else if (type == "Metaspace") {
    d.metaspace = true;
    if (absl::Status s =
            GetString(j, "replacement", "\xE2\x96\x81", &d.metaspace_replacement, where);
        !s.ok()) {
      return s;
    }
    std::string scheme;
    if (absl::Status s = GetString(j, "prepend_scheme", "", &scheme, where); !s.ok()) return s;
    bool add_prefix_space = true;
    if (absl::Status s = GetBool(j, "add_prefix_space", true, &add_prefix_space, where); !s.ok()) {
      return s;
    }
    d.metaspace_strip_first = scheme.empty() ? add_prefix_space : scheme != "never";
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "decoder '", type,
        "' is not supported (supported: Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace, "
        "Metaspace)"));
  }
  return absl::OkStatus();
}

// The id of the token spelled `name`: an added token, else a model piece.
std::optional<int32_t> FindId(const BpeSpec& spec, std::string_view name) {
  for (const BpeAddedToken& t : spec.added_tokens) {
    if (t.content == name) return t.id;
  }
  for (const auto& [piece, id] : spec.vocab) {
    if (piece == name) return id;
  }
  return std::nullopt;
}

absl::Status ReadPostProcessor(const Json& j, BpeSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  const std::string where = absl::StrCat("post_processor ", type);
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return Bad(where, "'processors' must be an array");
    }
    for (const Json& p : j["processors"]) {
      if (absl::Status s = ReadPostProcessor(p, spec); !s.ok()) return s;
    }
  } else if (type == "ByteLevel") {
    // Adjusts offsets only.
  } else if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array()) {
      return Bad(where, "'single' must be an array");
    }
    const Json specials = j.value("special_tokens", Json::object());
    spec->prefix_ids.clear();
    spec->suffix_ids.clear();
    bool after_text = false;
    for (const Json& item : j["single"]) {
      if (item.contains("Sequence")) {
        after_text = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return Bad(where, "a 'single' item is neither a Sequence nor a SpecialToken");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      if (!specials.contains(name) || !specials[name].contains("ids") ||
          !specials[name]["ids"].is_array()) {
        return Bad(where, absl::StrCat("special token '", name, "' has no ids"));
      }
      for (const Json& id : specials[name]["ids"]) {
        if (!id.is_number_integer()) return Bad(where, absl::StrCat("'", name, "' ids"));
        (after_text ? spec->suffix_ids : spec->prefix_ids).push_back(id.get<int32_t>());
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 ||
          !j[key][1].is_number_integer()) {
        return Bad(where, absl::StrCat("'", key, "' must be [token, id]"));
      }
    }
    spec->prefix_ids = {j["cls"][1].get<int32_t>()};
    spec->suffix_ids = {j["sep"][1].get<int32_t>()};
  } else {
    return absl::UnimplementedError(
        absl::StrCat("post_processor '", type,
                     "' is not supported (supported: Sequence, TemplateProcessing, ByteLevel, "
                     "RobertaProcessing, BertProcessing)"));
  }
  return absl::OkStatus();
}

absl::Status ReadModel(const Json& m, BpeSpec* spec) {
  if (!m.is_object()) return Bad("model", "missing or not an object");
  const std::string type = m.contains("type") ? TypeOf(m) : "BPE";
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("model type '", type, "' is not supported (only BPE)"));
  }
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
    return absl::UnimplementedError("model: BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() &&
        !(m[key].is_string() && m[key].get<std::string>().empty())) {
      return absl::UnimplementedError(absl::StrCat("model: '", key, "' is not supported"));
    }
  }
  if (absl::Status s = GetString(m, "unk_token", "", &spec->unk_token, "model"); !s.ok()) return s;
  if (absl::Status s = GetBool(m, "fuse_unk", false, &spec->fuse_unk, "model"); !s.ok()) return s;
  if (absl::Status s = GetBool(m, "byte_fallback", false, &spec->byte_fallback, "model"); !s.ok()) {
    return s;
  }
  if (absl::Status s = GetBool(m, "ignore_merges", false, &spec->ignore_merges, "model"); !s.ok()) {
    return s;
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return Bad("model", "'vocab' must be an object of piece -> id");
  }
  spec->vocab.reserve(m["vocab"].size());
  for (const auto& [piece, id] : m["vocab"].items()) {
    if (!id.is_number_integer()) {
      return Bad("model", absl::StrCat("the id of piece '", piece, "' is not an integer"));
    }
    spec->vocab.emplace_back(piece, id.get<int64_t>() > INT32_MAX ? -1 : id.get<int32_t>());
  }
  if (!m.contains("merges") || !m["merges"].is_array()) {
    return Bad("model", "'merges' must be an array");
  }
  spec->merges.reserve(m["merges"].size());
  for (const Json& merge : m["merges"]) {
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Bad("model", absl::StrCat("merge '", s, "' is not two pieces separated by a space"));
      }
      spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      spec->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return Bad("model", absl::StrCat("merge ", spec->merges.size(),
                                       " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Json& j, BpeSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_array()) return Bad("added_tokens", "must be an array");
  for (const Json& t : j) {
    BpeAddedToken token;
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return Bad("added_tokens", "each needs an integer 'id' and a string 'content'");
    }
    token.id = t["id"].get<int64_t>() > INT32_MAX ? -1 : t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    const std::string where = absl::StrCat("added token '", token.content, "'");
    for (auto [key, dst] :
         {std::pair{"special", &token.special}, std::pair{"lstrip", &token.lstrip},
          std::pair{"rstrip", &token.rstrip}, std::pair{"normalized", &token.normalized}}) {
      if (absl::Status s = GetBool(t, key, false, dst, where); !s.ok()) return s;
    }
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

// A tokenizer_config.json token: "text" or {"content": "text", ...}; empty when absent.
std::string ConfigToken(const Json& config, const char* key) {
  if (!config.contains(key)) return "";
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

// A member of `doc`, or null; by reference: a copy of "model" would copy the whole vocabulary.
const Json& Member(const Json& doc, const char* key) {
  static const Json kNull;
  const auto it = doc.find(key);
  return it == doc.end() ? kNull : *it;
}

absl::Status ParseDocument(const Json& doc, const Json& config, BpeSpec* spec) {
  if (!doc.is_object()) return absl::InvalidArgumentError("not a JSON object");
  if (absl::Status s = ReadModel(Member(doc, "model"), spec); !s.ok()) return s;
  if (absl::Status s = ReadAddedTokens(Member(doc, "added_tokens"), spec); !s.ok()) return s;
  if (absl::Status s = ReadNormalizer(Member(doc, "normalizer"), spec); !s.ok()) return s;
  if (absl::Status s = ReadPreTokenizer(Member(doc, "pre_tokenizer"), spec); !s.ok()) return s;
  if (absl::Status s = ReadPostProcessor(Member(doc, "post_processor"), spec); !s.ok()) return s;
  bool fused = false;
  if (absl::Status s = ReadDecoder(Member(doc, "decoder"), &fused, spec); !s.ok()) return s;

  spec->bos_id = spec->prefix_ids.empty() ? -1 : spec->prefix_ids.front();
  if (config.is_object()) {
    for (auto [key, dst] :
         {std::pair{"bos_token", &spec->bos_id}, std::pair{"eos_token", &spec->eos_id}}) {
      if (!config.contains(key)) continue;
      const std::string name = ConfigToken(config, key);
      if (name.empty()) {
        *dst = -1;
        continue;
      }
      const std::optional<int32_t> id = FindId(*spec, name);
      if (!id) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", key, " '", name,
                                                       "' is not a token of tokenizer.json"));
      }
      *dst = *id;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BpeSpec> ParseHfTokenizerJson(std::string_view json, std::string_view config_json,
                                             const std::string& source,
                                             const std::string& config_source) {
  BpeSpec spec;
  spec.source = source;
  // Both documents pass the depth limit before any DOM exists: the readers below copy and
  // recurse (Sequence inside Sequence), which a hostile nesting would turn into a stack overflow.
  absl::StatusOr<Json> doc = ParseJson(json, source);
  if (!doc.ok()) return doc.status();
  Json config;
  if (!config_json.empty()) {
    absl::StatusOr<Json> c = ParseJson(config_json, config_source);
    if (!c.ok()) return c.status();
    config = *std::move(c);
  }
  absl::Status status;
  try {
    status = ParseDocument(*doc, config, &spec);
  } catch (const Json::exception& e) {  // a shape the checks above did not foresee
    status = absl::InvalidArgumentError(absl::StrCat("unexpected JSON shape: ", e.what()));
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(source, ": ", status.message()));
  }
  return spec;
}

absl::StatusOr<BpeSpec> ReadHfTokenizerFiles(const std::string& path) {
  absl::StatusOr<std::string> json = ReadJsonText(path);
  if (!json.ok()) return json.status();
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::string config;
  std::string source = path;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    absl::StatusOr<std::string> text = ReadJsonText(config_path.string());
    if (!text.ok()) return text.status();
    config = *std::move(text);
    source = absl::StrCat(path, " (with tokenizer_config.json)");
  }
  return ParseHfTokenizerJson(*json, config, source, config_path.string());
}

absl::Status ApplyGgufPreTokenizer(std::string_view pre, BpeSpec* spec) {
  PreTokenizerStep split;
  split.kind = PreTokenizerStep::Kind::kSplit;
  split.regex = true;
  split.behavior = SplitBehavior::kIsolated;
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::Kind::kByteLevel;
  byte_level.add_prefix_space = false;
  byte_level.use_regex = false;
  spec->normalizers.clear();
  spec->pre_tokenizers.clear();
  if (pre == "llama-bpe" || pre == "llama3") {
    split.pattern = kLlama3Pattern;
    spec->pre_tokenizers = {split, byte_level};
  } else if (pre == "qwen2") {
    NormalizerStep nfc;
    nfc.kind = NormalizerStep::Kind::kNfc;
    spec->normalizers.push_back(nfc);
    split.pattern = kQwen2Pattern;
    spec->pre_tokenizers = {split, byte_level};
  } else if (pre == "gpt-2" || pre == "default") {
    byte_level.use_regex = true;
    spec->pre_tokenizers = {byte_level};
  } else {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.ggml.pre '", std::string(pre),
                     "' is not a known pre-tokenizer (known: llama-bpe, qwen2, gpt-2, default)"));
  }
  return absl::OkStatus();
}

}  // namespace banyan::text
