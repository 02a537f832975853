// The three subword models: WordPiece (greedy longest match), BPE (ranked merges) and Unigram
// (Viterbi over piece scores), following HF tokenizers' models/.
#include "pipeline/tok_internal.h"

#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>

namespace xdna::tok {

static size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2; }

void Model::finish() {
  int32_t max_id = -1;
  for (auto& [t, id] : vocab) max_id = std::max(max_id, id);
  id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  for (auto& [t, id] : vocab) id_to_token[static_cast<size_t>(id)] = t;
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab.find(name);
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }
  if (kind == Unigram) {
    min_score = std::numeric_limits<double>::infinity();
    for (double s : scores) min_score = std::min(min_score, s);
    for (auto& t : id_to_token) max_piece_bytes = std::max(max_piece_bytes, t.size());
  }
}

void Model::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  switch (kind) {
    case WordPiece: wordpiece(word, out); break;
    case BPE: bpe(word, out); break;
    case Unigram: unigram(word, out); break;
  }
}

void Model::wordpiece(std::string_view word, std::vector<int32_t>& out) const {
  auto unk = [&] {
    if (unk_id < 0) throw std::runtime_error("tokenizer: WordPiece needs an unk_token in its vocab");
    out.push_back(unk_id);
  };
  size_t chars = 0;
  for (unsigned char b : word) chars += (b & 0xC0) != 0x80;
  if (chars > max_input_chars_per_word) return unk();
  size_t first = out.size();
  std::string key;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      key.clear();
      if (start > 0) key += continuing_subword_prefix;
      key.append(word.substr(start, end - start));
      auto it = vocab.find(key);
      if (it != vocab.end()) {
        found = it->second;
        break;
      }
      do end--; while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      out.resize(first);
      return unk();
    }
    out.push_back(found);
    start = end;
  }
}

void Model::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto add = [&](int32_t id) {
    int n = static_cast<int>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, true});
  };
  // Initial symbols: one per character (with prefix/suffix), byte fallback or (fused) unk.
  int32_t pending_unk = -1;
  std::string key;
  for (size_t i = 0; i < word.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    bool first = i == 0, last = i + n == word.size();
    key.clear();
    if (!first) key += continuing_subword_prefix;
    key.append(word.substr(i, n));
    if (last) key += end_of_word_suffix;
    i += n;
    auto it = vocab.find(key);
    if (it != vocab.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char b : key) all = all && byte_ids[b] >= 0;
      if (all) {
        // HF leaves a pending unk in place here and emits it after the bytes (fused or not).
        for (unsigned char b : key) add(byte_ids[b]);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk >= 0 && !fuse_unk) add(pending_unk);
      pending_unk = unk_id;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  // Merge the lowest-ranked pair first (ties: leftmost), as Word::merge_all.
  struct Merge {
    uint32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  auto pair_key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  auto push = [&](int pos) {
    int nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merges.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); i++) push(i);
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    Symbol& right = sym[s.next];
    auto it = merges.find(pair_key(s.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;  // stale entry
    s.id = top.new_id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) push(s.prev);
    push(top.pos);
  }
  for (const auto& s : sym)
    if (s.alive) out.push_back(s.id);
}

void Model::unigram(std::string_view s, std::vector<int32_t>& out) const {
  constexpr double kUnkPenalty = 10.0;
  struct Node {
    int32_t id = 0;
    double score = 0;
    long start = -1;
  };
  const double unk_score = min_score - kUnkPenalty;
  std::vector<Node> best(s.size() + 1);
  std::string key;
  for (size_t pos = 0; pos < s.size();) {
    size_t mblen = std::min(utf8_len(static_cast<unsigned char>(s[pos])), s.size() - pos);
    double here = best[pos].score;
    bool single = false;
    // Every vocab piece that starts here, shortest first (the trie's order: ties keep the first).
    for (size_t len = 1; len <= max_piece_bytes && pos + len <= s.size(); len++) {
      if (pos + len < s.size() && (static_cast<unsigned char>(s[pos + len]) & 0xC0) == 0x80) continue;
      key.assign(s.data() + pos, len);
      auto it = vocab.find(key);
      if (it == vocab.end()) continue;
      Node& t = best[pos + len];
      double cand = here + scores[static_cast<size_t>(it->second)];
      if (t.start < 0 || cand > t.score) t = {it->second, cand, static_cast<long>(pos)};
      if (len == mblen) single = true;
    }
    if (!single) {
      if (unk_id < 0) throw std::runtime_error("tokenizer: Unigram met an unknown character but has no unk_id");
      Node& t = best[pos + mblen];
      double cand = here + unk_score;
      if (t.start < 0 || cand > t.score) t = {unk_id, cand, static_cast<long>(pos)};
    }
    pos += mblen;
  }
  // Walk back; consecutive unknowns are fused into one piece (fuse_unk is always on).
  std::vector<std::pair<size_t, size_t>> pieces;  // byte ranges, reversed
  std::vector<bool> is_unk;
  for (size_t end = s.size(); end > 0;) {
    const Node& n = best[end];
    size_t start = static_cast<size_t>(n.start);
    bool unk = n.id == unk_id;
    if (unk && !is_unk.empty() && is_unk.back()) pieces.back().first = start;
    else pieces.emplace_back(start, end), is_unk.push_back(unk);
    end = start;
  }
  for (size_t i = pieces.size(); i-- > 0;) {
    auto [a, b] = pieces[i];
    std::string_view piece = s.substr(a, b - a);
    auto it = vocab.find(std::string(piece));
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char c : piece) all = all && byte_ids[c] >= 0;
      if (all) {
        for (unsigned char c : piece) out.push_back(byte_ids[c]);
        continue;
      }
    }
    out.push_back(unk_id);
  }
}

}  // namespace xdna::tok
