// Normalizers and pre-tokenizers, following HF tokenizers' normalizers/ and pre_tokenizers/.
#include "pipeline/tok_internal.h"

#include <algorithm>

namespace xdna::tok {

static bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

template <class Pred>
static void remove_if(std::u32string& s, Pred drop) {
  size_t w = 0;
  for (char32_t c : s)
    if (!drop(c)) s[w++] = c;
  s.resize(w);
}

static void replace_all(std::u32string& s, const Regex& pattern, const std::u32string& content) {
  auto matches = pattern.find_all(s);
  if (matches.empty()) return;
  std::u32string out;
  size_t prev = 0;
  for (auto [a, b] : matches) {
    out.append(s, prev, a - prev);
    out += content;
    prev = b;
  }
  out.append(s, prev, std::u32string::npos);
  s = std::move(out);
}

void Normalizer::apply(std::u32string& s) const {
  switch (kind) {
    case Bert: {
      std::u32string out;
      out.reserve(s.size() + 8);
      for (char32_t c : s) {
        if (clean_text) {
          bool ws = c == '\t' || c == '\n' || c == '\r' || is_whitespace(c);
          if (!ws && (c == 0 || c == 0xFFFD || is_control_other(c))) continue;
          if (ws) c = ' ';
        }
        if (handle_chinese_chars && is_chinese_char(c)) {
          out.push_back(' ');
          out.push_back(c);
          out.push_back(' ');
        } else {
          out.push_back(c);
        }
      }
      s = std::move(out);
      if (strip_accents) {
        s = normalize(s, NormForm::NFD);
        remove_if(s, is_mark_nonspacing);
      }
      if (lowercase) s = tok::lowercase(s);
      break;
    }
    case NFD: s = normalize(s, NormForm::NFD); break;
    case NFKD: s = normalize(s, NormForm::NFKD); break;
    case NFC: s = normalize(s, NormForm::NFC); break;
    case NFKC: s = normalize(s, NormForm::NFKC); break;
    case Lowercase: s = tok::lowercase(s); break;
    case StripAccents: remove_if(s, is_combining_mark); break;
    case Strip: {
      size_t a = 0, b = s.size();
      if (strip_left)
        while (a < b && is_whitespace(s[a])) a++;
      if (strip_right)
        while (b > a && is_whitespace(s[b - 1])) b--;
      s = s.substr(a, b - a);
      break;
    }
    case Replace: replace_all(s, *pattern, content); break;
    case Prepend:
      if (!s.empty()) s.insert(0, content);
      break;
    case Sequence:
      for (const auto& n : children) n.apply(s);
      break;
  }
}

// ---- Splitting --------------------------------------------------------------------------------
struct Span {
  size_t a, b;
  bool is_match;
};

// `matches` are sorted non-overlapping [a, b) ranges; fills the gaps and applies the behaviour
// exactly as NormalizedString::split does, then appends the non-empty pieces to `out`.
static void split_piece(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                        SplitBehavior behavior, std::vector<Piece>& out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [a, b] : matches) {
    if (a > prev) spans.push_back({prev, a, invert});
    spans.push_back({a, b, !invert});
    prev = b;
  }
  if (prev < p.text.size()) spans.push_back({prev, p.text.size(), invert});

  std::vector<Span> parts;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (auto& s : spans)
        if (!s.is_match) parts.push_back(s);
      break;
    case SplitBehavior::Isolated: parts.swap(spans); break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.is_match && !prev_match && !parts.empty()) parts.back().b = s.b;
        else parts.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        auto& s = spans[i];
        if (s.is_match && !prev_match && !parts.empty()) parts.back().a = s.a;
        else parts.push_back(s);
        prev_match = s.is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.is_match == prev_match && !parts.empty()) parts.back().b = s.b;
        else parts.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (auto& s : parts) {
    if (s.b <= s.a) continue;
    out.push_back({p.text.substr(s.a, s.b - s.a), p.at_start && s.a == 0});
  }
}

template <class Pred>
static std::vector<std::pair<size_t, size_t>> char_matches(const std::u32string& s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size(); i++)
    if (pred(s[i])) m.emplace_back(i, i + 1);
  return m;
}

template <class F>
static void for_each_split(std::vector<Piece>& pieces, F split_one) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) split_one(p, out);
  pieces = std::move(out);
}

const std::u32string& byte_to_char_table() {
  static const std::u32string table = [] {
    std::u32string t(256, 0);
    char32_t next = 256;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, int> rev = [] {
    std::unordered_map<char32_t, int> r;
    const auto& t = byte_to_char_table();
    for (int b = 0; b < 256; b++) r[t[b]] = b;
    return r;
  }();
  auto it = rev.find(c);
  return it == rev.end() ? -1 : it->second;
}

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
  switch (kind) {
    case Bert:
      for_each_split(pieces, [](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, char_matches(p.text, is_whitespace), false, SplitBehavior::Removed, out);
      });
      for_each_split(pieces, [](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, char_matches(p.text, is_punctuation), false, SplitBehavior::Isolated, out);
      });
      break;
    case WhitespaceSplit:
      for_each_split(pieces, [](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, char_matches(p.text, is_whitespace), false, SplitBehavior::Removed, out);
      });
      break;
    case Punctuation:
      for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, char_matches(p.text, is_punctuation), false, behavior, out);
      });
      break;
    case Digits:
      for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, char_matches(p.text, is_numeric), false,
                    individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
      });
      break;
    case Whitespace:  // keep the matches of \w+|[^\w\s]+
    case Split:
      for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        split_piece(p, pattern->find_all(p.text), invert, behavior, out);
      });
      break;
    case Metaspace:
      for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        Piece q = p;
        for (auto& c : q.text)
          if (c == ' ') c = replacement;
        bool starts = !q.text.empty() && q.text[0] == replacement;
        if ((prepend == Always && !starts) || (prepend == First && !starts && p.at_start))
          q.text.insert(q.text.begin(), replacement);
        if (split) {
          auto r = replacement;
          split_piece(q, char_matches(q.text, [r](char32_t c) { return c == r; }), false,
                      SplitBehavior::MergedWithNext, out);
        } else if (!q.text.empty()) {
          out.push_back(std::move(q));
        }
      });
      break;
    case ByteLevel:
      for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        Piece q = p;
        if (add_prefix_space && (q.text.empty() || q.text[0] != ' ')) q.text.insert(q.text.begin(), U' ');
        size_t first = out.size();
        if (use_regex) split_piece(q, pattern->find_all(q.text), false, SplitBehavior::Isolated, out);
        else if (!q.text.empty()) out.push_back(std::move(q));
        const auto& table = byte_to_char_table();
        for (size_t i = first; i < out.size(); i++) {
          std::string bytes = u32_to_utf8(out[i].text);
          out[i].text.clear();
          for (unsigned char b : bytes) out[i].text.push_back(table[b]);
        }
      });
      break;
    case Sequence:
      for (const auto& c : children) c.apply(pieces);
      break;
  }
}

}  // namespace xdna::tok
