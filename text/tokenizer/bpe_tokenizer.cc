#include "text/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/tokenizer/hf_json_reader.h"
#include "common/utf8.h"

namespace banyan::text {
namespace {

// Largest id accepted: ids index dense tables.
constexpr int32_t kMaxId = (1 << 24) - 1;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string BytePieceName(int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return name;
}


// A piece of input between added tokens, or one added token.
struct Section {
  std::string_view text;
  int added = -1;  // index into BpeSpec::added_tokens; -1 for text
  bool at_text_start = false;
};

// Cuts `text` at the leftmost-longest matches of `trie` (whose values index `added`), then lets
// lstrip/rstrip tokens swallow the whitespace of the text beside them.
std::vector<Section> SplitAtAddedTokens(std::string_view text, const ByteTrie& trie,
                                        const std::array<bool, 256>* first_bytes,
                                        const std::vector<BpeAddedToken>& added) {
  std::vector<Section> sections;
  size_t text_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t index = -1;
    size_t length = 0;
    if (first_bytes == nullptr || (*first_bytes)[static_cast<uint8_t>(text[pos])]) {
      length = trie.LongestPrefix(text.substr(pos), &index);
    }
    if (length == 0) {
      ++pos;
      continue;
    }
    if (pos > text_begin) {
      sections.push_back({text.substr(text_begin, pos - text_begin), -1, text_begin == 0});
    }
    sections.push_back({text.substr(pos, length), index, pos == 0});
    pos += length;
    text_begin = pos;
  }
  if (text_begin < text.size()) {
    sections.push_back({text.substr(text_begin), -1, text_begin == 0});
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].added < 0) continue;
    const BpeAddedToken& token = added[sections[i].added];
    if (token.lstrip && i > 0 && sections[i - 1].added < 0) {
      sections[i - 1].text = TrimWhiteSpace(sections[i - 1].text, false, true);
    }
    if (token.rstrip && i + 1 < sections.size() && sections[i + 1].added < 0) {
      sections[i + 1].text = TrimWhiteSpace(sections[i + 1].text, true, false);
    }
  }
  return sections;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJsonFile(const std::string& path) {
  absl::StatusOr<BpeSpec> spec = ReadHfTokenizerFiles(path);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = Create(*std::move(spec));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeSpec spec) {
  absl::StatusOr<TextPipeline> pipeline = TextPipeline::Create(spec);
  if (!pipeline.ok()) return pipeline.status();
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer(std::move(spec), *std::move(pipeline)));
  if (absl::Status s = tokenizer->BuildIndexes(); !s.ok()) return s;
  return tokenizer;
}

BpeTokenizer::BpeTokenizer(BpeSpec spec, TextPipeline pipeline)
    : spec_(std::move(spec)), pipeline_(std::move(pipeline)) {}

absl::Status BpeTokenizer::BuildIndexes() {
  int32_t max_id = -1;
  for (const auto& [piece, id] : spec_.vocab) {
    if (id < 0 || id > kMaxId) {
      return absl::InvalidArgumentError(
          absl::StrCat("piece '", piece, "' has id ", id, ", outside [0, ", kMaxId, "]"));
    }
    max_id = std::max(max_id, id);
  }
  for (const BpeAddedToken& t : spec_.added_tokens) {
    if (t.id < 0 || t.id > kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat("added token '", t.content, "' has id ", t.id,
                                                     ", outside [0, ", kMaxId, "]"));
    }
    if (t.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("added token ", t.id, " is empty"));
    }
    max_id = std::max(max_id, t.id);
  }
  if (max_id < 0) return absl::InvalidArgumentError("the vocabulary is empty");
  pieces_.assign(max_id + 1, "");
  kinds_.assign(max_id + 1, IdKind::kNone);
  byte_of_.assign(max_id + 1, -1);
  for (const auto& [piece, id] : spec_.vocab) {
    if (kinds_[id] != IdKind::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat("pieces '", pieces_[id], "' and '", piece, "' have the same id ", id));
    }
    if (!vocab_.emplace(piece, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("piece '", piece, "' appears twice"));
    }
    pieces_[id] = piece;
    kinds_[id] = IdKind::kPiece;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(BytePieceName(b));
    byte_piece_ids_[b] = it == vocab_.end() ? -1 : it->second;
    if (it != vocab_.end() && spec_.decoder.byte_fallback) {
      kinds_[it->second] = IdKind::kByte;
      byte_of_[it->second] = static_cast<int16_t>(b);
    }
  }
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    const BpeAddedToken& t = spec_.added_tokens[i];
    pieces_[t.id] = t.content;
    kinds_[t.id] = t.special ? IdKind::kSpecial : IdKind::kAdded;
    if (t.normalized && pipeline_.has_normalizers()) {
      const std::string normalized = pipeline_.Normalize(t.content);
      if (!normalized.empty()) normalized_added_.Insert(normalized, static_cast<int32_t>(i));
    } else {
      raw_added_.Insert(t.content, static_cast<int32_t>(i));
      raw_added_first_[static_cast<uint8_t>(t.content[0])] = true;
    }
  }
  if (!spec_.unk_token.empty()) {
    const auto it = vocab_.find(spec_.unk_token);
    if (it == vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token '", spec_.unk_token, "' is not in the vocabulary"));
    }
    unk_id_ = it->second;
  }
  merges_.reserve(spec_.merges.size());
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const auto& [left, right] = spec_.merges[rank];
    const auto l = vocab_.find(left);
    const auto r = vocab_.find(right);
    const auto merged = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || merged == vocab_.end()) {
      const std::string missing = l == vocab_.end()   ? absl::StrCat("'", left, "'")
                                  : r == vocab_.end() ? absl::StrCat("'", right, "'")
                                                      : std::string("their concatenation");
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " ('", left, "' + '", right,
                                                     "'): ", missing, " is not in the vocabulary"));
    }
    // As `tokenizers`, a repeated pair keeps its last rank.
    merges_[PairKey(l->second, r->second)] = {static_cast<int32_t>(rank), merged->second};
  }
  for (const auto* ids : {&spec_.prefix_ids, &spec_.suffix_ids}) {
    for (const int32_t id : *ids) {
      if (id < 0 || id > max_id) {
        return absl::InvalidArgumentError(
            absl::StrCat("the post-processor adds id ", id, ", outside the vocabulary"));
      }
    }
  }
  for (const int32_t id : {spec_.bos_id, spec_.eos_id}) {
    if (id < -1 || id > max_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("bos/eos id ", id, " is outside the vocabulary of ", max_id + 1));
    }
  }
  return absl::OkStatus();
}

std::string_view BpeTokenizer::Piece(int id) const {
  return id >= 0 && id < vocab_size() ? std::string_view(pieces_[id]) : std::string_view();
}

int32_t BpeTokenizer::PieceId(std::string_view piece) const {
  const auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view input, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos) ids = spec_.prefix_ids;
  const std::string text = SanitizeUtf8(input);
  for (const Section& s :
       SplitAtAddedTokens(text, raw_added_, &raw_added_first_, spec_.added_tokens)) {
    if (s.added >= 0) {
      ids.push_back(spec_.added_tokens[s.added].id);
    } else if (!s.text.empty()) {
      EncodeText(s.text, s.at_text_start, &ids);
    }
  }
  if (add_bos) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return ids;
}

void BpeTokenizer::EncodeText(std::string_view text, bool at_text_start,
                              std::vector<int32_t>* ids) const {
  const std::string normalized = pipeline_.Normalize(std::string(text));
  if (normalized_added_.empty()) {
    for (const std::string& word : pipeline_.PreTokenize(normalized, at_text_start)) {
      EncodeWord(word, ids);
    }
    return;
  }
  for (const Section& s :
       SplitAtAddedTokens(normalized, normalized_added_, nullptr, spec_.added_tokens)) {
    if (s.added >= 0) {
      ids->push_back(spec_.added_tokens[s.added].id);
    } else if (!s.text.empty()) {
      for (const std::string& word :
           pipeline_.PreTokenize(std::string(s.text), at_text_start && s.at_text_start)) {
        EncodeWord(word, ids);
      }
    }
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (spec_.ignore_merges) {
    if (const int32_t id = PieceId(word); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  // A doubly linked list of symbols; a merge grows the left one and empties the right one.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto push = [&](int32_t id) {
    const int index = static_cast<int>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, false});
  };
  bool last_unknown = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length =
        std::min<size_t>(word.size() - pos, utf8::OneCharLen(static_cast<uint8_t>(word[pos])));
    const std::string_view ch = word.substr(pos, length);
    pos += length;
    if (const int32_t id = PieceId(ch); id >= 0) {
      push(id);
      last_unknown = false;
      continue;
    }
    if (spec_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
          return byte_piece_ids_[static_cast<uint8_t>(c)] >= 0;
        })) {
      for (const char c : ch) push(byte_piece_ids_[static_cast<uint8_t>(c)]);
      last_unknown = false;
      continue;
    }
    if (unk_id_ < 0) continue;  // `tokenizers` fails here; the character is dropped
    if (!(spec_.fuse_unk && last_unknown)) push(unk_id_);
    last_unknown = true;
  }

  struct Candidate {
    int32_t rank;
    int pos;
    int32_t merged;
  };
  struct Later {  // pops the lowest rank, then the leftmost
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
  const auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].id, symbols[symbols[left].next].id));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<int>(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.second != top.merged) continue;  // stale
    left.id = top.merged;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

void BpeTokenizer::Emit(std::string_view text, DecodeState* state, std::string* out) const {
  const BpeDecoderSpec& d = spec_.decoder;
  if (state->at_start && d.strip_start > 0 && !text.empty()) {
    while (state->lead_stripped < d.strip_start && !d.strip_content.empty() &&
           text.starts_with(d.strip_content)) {
      text.remove_prefix(d.strip_content.size());
      ++state->lead_stripped;
    }
    if (!text.empty() || state->lead_stripped >= d.strip_start) state->at_start = false;
  }
  if (text.empty()) return;
  out->append(text);
  state->text_empty = false;
}

void BpeTokenizer::DecodeStep(int32_t id, DecodeState* state, std::string* out) const {
  if (id < 0 || id >= vocab_size()) return;
  const IdKind kind = kinds_[id];
  if (kind == IdKind::kNone || kind == IdKind::kSpecial) return;
  const BpeDecoderSpec& d = spec_.decoder;
  const bool first = state->tokens_seen++ == 0;
  std::string text;
  std::string piece_text;
  bool raw_bytes = false;
  switch (kind) {
    case IdKind::kByte:
      state->pending.push_back(static_cast<char>(byte_of_[id]));
      raw_bytes = true;
      break;
    case IdKind::kPiece:
      if (d.byte_level) {
        if (!ByteLevelAlphabet::Get().Unspell(pieces_[id], &state->pending)) {
          state->pending.append(pieces_[id]);  // as `tokenizers`: the piece's own bytes
        }
        raw_bytes = true;
        break;
      }
      piece_text = pieces_[id];
      for (const auto& [from, to] : d.replacements) {
        piece_text = absl::StrReplaceAll(piece_text, {{from, to}});
      }
      if (d.metaspace) {
        piece_text = absl::StrReplaceAll(piece_text, {{d.metaspace_replacement, " "}});
        if (first && d.metaspace_strip_first && piece_text.starts_with(' ')) {
          piece_text.erase(0, 1);
        }
      }
      break;
    case IdKind::kAdded:
      piece_text = pieces_[id];
      break;
    default:
      return;
  }
  DrainPending(/*complete=*/!raw_bytes, state, &text);
  Emit(text, state, out);
  if (!raw_bytes) Emit(piece_text, state, out);
}

std::string BpeTokenizer::TokenBytes(int id) const {
  if (id < 0 || id >= vocab_size()) return "";
  switch (kinds_[id]) {
    case IdKind::kNone:
      return "";
    case IdKind::kByte:
      return std::string(1, static_cast<char>(byte_of_[id]));
    case IdKind::kPiece:
      break;
    default:
      return pieces_[id];
  }
  std::string bytes;
  if (spec_.decoder.byte_level && ByteLevelAlphabet::Get().Unspell(pieces_[id], &bytes)) {
    return bytes;
  }
  std::string text = pieces_[id];
  for (const auto& [from, to] : spec_.decoder.replacements) {
    text = absl::StrReplaceAll(text, {{from, to}});
  }
  if (spec_.decoder.metaspace) {
    text = absl::StrReplaceAll(text, {{spec_.decoder.metaspace_replacement, " "}});
  }
  return text;
}

std::string BpeTokenizer::Describe() const {
  return absl::StrCat(spec_.decoder.byte_level ? "byte-level BPE" : "BPE",
                      spec_.byte_fallback ? " with byte fallback" : "", " from ", spec_.source,
                      ", ", vocab_size(), " ids, ", merges_.size(), " merges, ",
                      spec_.added_tokens.size(), " added tokens");
}

std::vector<std::pair<std::string, int32_t>> BpeTokenizer::SpecialTokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t id = 0; id < kinds_.size(); ++id) {
    if (kinds_[id] == IdKind::kSpecial && !pieces_[id].empty()) {
      out.emplace_back(pieces_[id], static_cast<int32_t>(id));
    }
  }
  return out;
}

}  // namespace banyan::text
