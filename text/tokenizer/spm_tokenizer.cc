#include "text/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/tokenizer/spm_model_reader.h"
#include "common/utf8.h"

namespace banyan::text {
namespace {

// sentencepiece's penalty for an unknown character in the unigram Viterbi pass.
constexpr float kUnkPenalty = 10.0f;

bool IsSegmentable(PieceType type) {
  return type == PieceType::kNormal || type == PieceType::kUserDefined ||
         type == PieceType::kUnused;
}

std::string BytePieceName(int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::FromFile(const std::string& path) {
  absl::StatusOr<SpmVocab> vocab = ReadSpmModelFile(path);
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::unique_ptr<SpmTokenizer>> tokenizer = FromVocab(*std::move(vocab));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("SentencePiece model '", path,
                                     "' is not usable: ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::FromVocab(SpmVocab vocab) {
  if (absl::Status s = ValidateSpmVocab(vocab); !s.ok()) return s;
  absl::StatusOr<SpmNormalizer> normalizer = SpmNormalizer::Create(vocab);
  if (!normalizer.ok()) return normalizer.status();
  std::unique_ptr<SpmTokenizer> tokenizer(new SpmTokenizer(std::move(vocab), *std::move(normalizer)));
  tokenizer->BuildIndexes();
  return tokenizer;
}

SpmTokenizer::SpmTokenizer(SpmVocab vocab, SpmNormalizer normalizer)
    : vocab_(std::move(vocab)), normalizer_(std::move(normalizer)) {}

void SpmTokenizer::BuildIndexes() {
  const int n = vocab_size();
  byte_value_.assign(n, -1);
  // sentencepiece starts max at FLT_MIN (the smallest positive float), so with all-negative
  // scores the maximum ends up 0; this matters for the user-defined bonus.
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;
  for (int id = 0; id < n; ++id) {
    const std::string& piece = vocab_.pieces[id];
    const PieceType type = vocab_.types[id];
    if (IsSegmentable(type)) {
      piece_ids_.emplace(piece, id);
      if (vocab_.model_type == SpmModelType::kUnigram) unigram_pieces_.Insert(piece, id);
    } else {
      reserved_ids_.emplace(piece, id);
    }
    if (type == PieceType::kUserDefined) user_defined_.Insert(piece, id);
    if (type == PieceType::kByte) byte_value_[id] = static_cast<int16_t>(ParseBytePiece(piece));
    if (type == PieceType::kNormal) {
      min_score_ = std::min(min_score_, vocab_.scores[id]);
      max_score_ = std::max(max_score_, vocab_.scores[id]);
    }
  }
  if (min_score_ == FLT_MAX) min_score_ = 0.0f;
  if (max_score_ == FLT_MIN) max_score_ = 0.0f;
  for (int b = 0; b < 256; ++b) byte_ids_[b] = PieceToId(BytePieceName(b));
  // Each piece's text, every "▁" a space, made once here rather than per decoded token.
  piece_text_.resize(n);
  for (int id = 0; id < n; ++id) {
    const std::string_view piece = vocab_.pieces[id];
    std::string& text = piece_text_[id];
    for (size_t pos = 0; pos < piece.size();) {
      const size_t space = piece.find(utf8::kSpaceSymbol, pos);
      text.append(piece.substr(pos, space - pos));
      if (space == std::string_view::npos) break;
      text.push_back(' ');
      pos = space + utf8::kSpaceSymbol.size();
    }
  }
}

std::string_view SpmTokenizer::Piece(int id) const {
  return IsValidId(id) ? std::string_view(vocab_.pieces[id]) : std::string_view();
}

int32_t SpmTokenizer::PieceToId(std::string_view piece) const {
  if (auto it = reserved_ids_.find(piece); it != reserved_ids_.end()) return it->second;
  if (auto it = piece_ids_.find(piece); it != piece_ids_.end()) return it->second;
  return vocab_.unk_id;
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  const std::string normalized = normalizer_.Normalize(text);
  if (normalized.empty()) return ids;
  const std::vector<Segment> segments =
      vocab_.model_type == SpmModelType::kBpe ? SegmentBpe(normalized) : SegmentUnigram(normalized);
  ids.reserve(ids.size() + segments.size());
  bool prev_unknown = false;
  for (const auto& [piece, id] : segments) {
    const bool unknown = id == vocab_.unk_id;
    if (unknown && vocab_.byte_fallback) {
      for (const char c : piece) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    } else if (!(unknown && prev_unknown)) {  // a run of unknown segments is one <unk>
      ids.push_back(id);
    }
    prev_unknown = unknown;
  }
  return ids;
}

std::vector<SpmTokenizer::Segment> SpmTokenizer::SegmentBpe(std::string_view normalized) const {
  // A doubly linked list of symbols over `normalized`; a merge grows the left symbol and empties
  // the right one.
  struct Symbol {
    int prev;
    int next;
    bool frozen;  // a user-defined piece: never merged
    std::string_view piece;
  };
  // A candidate merge of two adjacent symbols. `size` (their total length when queued) detects
  // entries made stale by later merges: symbols only grow, or empty when absorbed.
  struct Candidate {
    float score;
    int left;
    int right;
    size_t size;
  };
  struct Lower {  // pops the highest score, then the leftmost
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(normalized.size());
  for (size_t pos = 0; pos < normalized.size();) {
    const std::string_view rest = normalized.substr(pos);
    int32_t unused_id;
    size_t length = user_defined_.LongestPrefix(rest, &unused_id);
    const bool frozen = length > 0;
    if (!frozen) {
      length = std::min<size_t>(rest.size(), utf8::OneCharLen(static_cast<uint8_t>(rest[0])));
    }
    const int index = static_cast<int>(symbols.size());
    pos += length;
    symbols.push_back(
        {index - 1, pos < normalized.size() ? index + 1 : -1, frozen, rest.substr(0, length)});
  }

  std::priority_queue<Candidate, std::vector<Candidate>, Lower> agenda;
  RevMerges rev_merges;
  const auto maybe_add_pair = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const std::string_view merged(symbols[left].piece.data(),
                                  symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = piece_ids_.find(merged);
    if (it == piece_ids_.end()) return;
    agenda.push({vocab_.scores[it->second], left, right, merged.size()});
    if (vocab_.types[it->second] == PieceType::kUnused) {
      rev_merges[merged] = {symbols[left].piece, symbols[right].piece};
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) maybe_add_pair(static_cast<int>(i) - 1, i);

  while (!agenda.empty()) {
    const Candidate top = agenda.top();
    agenda.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.piece.empty() || right.piece.empty() ||
        left.piece.size() + right.piece.size() != top.size) {
      continue;  // stale
    }
    left.piece = std::string_view(left.piece.data(), top.size);
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.piece = std::string_view();
    maybe_add_pair(left.prev, top.left);
    maybe_add_pair(top.left, left.next);
  }

  std::vector<Segment> segments;
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    Resegment(symbols[i].piece, rev_merges, &segments);
  }
  return segments;
}

void SpmTokenizer::Resegment(std::string_view piece, const RevMerges& rev_merges,
                          std::vector<Segment>* out) const {
  const int32_t id = PieceToId(piece);
  if (vocab_.types[id] != PieceType::kUnused) {
    out->emplace_back(piece, id);
    return;
  }
  const auto it = rev_merges.find(piece);
  if (it == rev_merges.end()) {  // cannot happen: every unused merge was recorded
    out->emplace_back(piece, id);
    return;
  }
  Resegment(it->second.first, rev_merges, out);
  Resegment(it->second.second, rev_merges, out);
}

std::vector<SpmTokenizer::Segment> SpmTokenizer::SegmentUnigram(std::string_view normalized) const {
  // best[end]: the best segmentation of normalized[0, end) whose last piece ends at `end`.
  // The arithmetic types mirror sentencepiece's EncodeOptimized (double candidates, float
  // storage) so that near-ties resolve the same way.
  struct BestPath {
    int32_t id = -1;
    float score = 0.0f;  // total score of the path
    int start = -1;      // where its last piece starts; -1 until reached
  };
  const int size = static_cast<int>(normalized.size());
  const float unk_score = min_score_ - kUnkPenalty;
  std::vector<BestPath> best(size + 1);
  for (int start = 0; start < size;) {
    const float score_here = best[start].score;
    const int char_length =
        std::min(utf8::OneCharLen(static_cast<uint8_t>(normalized[start])), size - start);
    bool covers_one_char = false;
    unigram_pieces_.ForEachPrefix(normalized.substr(start), [&](size_t length, int32_t id) {
      const PieceType type = vocab_.types[id];
      if (type == PieceType::kUnused) return;
      const double piece_score =
          type == PieceType::kUserDefined
              ? static_cast<double>(static_cast<float>(length) * max_score_) - 0.1
              : static_cast<double>(vocab_.scores[id]);
      const double candidate = piece_score + score_here;
      BestPath& target = best[start + length];
      if (target.start == -1 || candidate > target.score) {
        target = {id, static_cast<float>(candidate), start};
      }
      if (static_cast<int>(length) == char_length) covers_one_char = true;
    });
    if (!covers_one_char) {
      const float candidate = unk_score + score_here;
      BestPath& target = best[start + char_length];
      if (target.start == -1 || candidate > target.score) {
        target = {vocab_.unk_id, candidate, start};
      }
    }
    start += char_length;
  }
  std::vector<Segment> segments;
  for (int end = size; end > 0; end = best[end].start) {
    const BestPath& node = best[end];
    segments.emplace_back(normalized.substr(node.start, end - node.start), node.id);
  }
  std::reverse(segments.begin(), segments.end());
  return segments;
}

void SpmTokenizer::AppendPieceText(int32_t id, bool text_empty, DecodeState* state,
                                std::string* out) const {
  // As sentencepiece 0.1.97's Decode: the first piece that starts with "▁" loses it; with
  // remove_extra_whitespaces so does every following one until some text has been output.
  if (state->bos_ws_seen || !text_empty) state->at_start = false;
  state->bos_ws_seen = false;
  switch (vocab_.types[id]) {
    case PieceType::kControl:
      return;
    case PieceType::kUnknown:
      out->append(vocab_.unk_surface);
      return;
    default:
      break;
  }
  std::string_view text = piece_text_[id];
  if (state->at_start && (vocab_.add_dummy_prefix || vocab_.remove_extra_whitespaces) &&
      std::string_view(vocab_.pieces[id]).starts_with(utf8::kSpaceSymbol)) {
    text.remove_prefix(1);  // the space that the leading "▁" became
    state->bos_ws_seen = !vocab_.remove_extra_whitespaces;
  }
  out->append(text);
}

void SpmTokenizer::DecodeStep(int32_t id, DecodeState* state, std::string* out) const {
  if (!IsValidId(id)) return;
  if (const int b = ByteOf(id); b >= 0) {
    state->pending.push_back(static_cast<char>(b));
    DrainPending(/*complete=*/false, state, out);
    return;
  }
  // A non-byte piece ends the byte run; whatever the run held is text now.
  DrainPending(/*complete=*/true, state, out);
  const size_t before = out->size();
  AppendPieceText(id, state->text_empty, state, out);
  if (out->size() > before) state->text_empty = false;
}

std::string SpmTokenizer::TokenBytes(int id) const {
  if (!IsValidId(id)) return "";
  if (const int b = ByteOf(id); b >= 0) return std::string(1, static_cast<char>(b));
  return piece_text_[id];
}

std::string SpmTokenizer::Describe() const {
  return absl::StrCat("SentencePiece ",
                      vocab_.model_type == SpmModelType::kBpe ? "BPE" : "unigram", ", ",
                      vocab_size(), " pieces");
}

std::vector<std::pair<std::string, int32_t>> SpmTokenizer::SpecialTokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t id = 0; id < vocab_.pieces.size(); ++id) {
    const PieceType type = vocab_.types[id];
    if ((type == PieceType::kControl || type == PieceType::kUnknown) && !vocab_.pieces[id].empty()) {
      out.emplace_back(vocab_.pieces[id], static_cast<int32_t>(id));
    }
  }
  return out;
}

}  // namespace banyan::text
