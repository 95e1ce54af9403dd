#include "model/unicode.h"

#include <algorithm>
#include <array>

namespace qlens::unicode {

// ---------------------------------------------------------------------------
// Table lookups

namespace {

struct AsciiCategories {
  std::array<Category, 128> cat{};
  AsciiCategories() {
    for (uint32_t c = 0; c < 128; ++c) {
      if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
        cat[c] = kLetter;
      else if (c >= '0' && c <= '9')
        cat[c] = kNumber;
      else if (c == ' ')
        cat[c] = kSeparator;
      else if (c < 0x20 || c == 0x7F)
        cat[c] = kOther;
      else if (c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '`' || c == '|' ||
               c == '~')
        cat[c] = kSymbol;
      else
        cat[c] = kPunct;
    }
  }
};

const AsciiCategories& ascii_categories() {
  static const AsciiCategories t;
  return t;
}

}  // namespace

Category category(uint32_t cp) {
  if (cp < 128) return ascii_categories().cat[cp];
  if (cp > 0x10FFFF) return kOther;
  const data::CategoryRun* b = data::kCategoryRanges;
  const data::CategoryRun* e = b + data::kCategoryRangesSize;
  // last run whose first <= cp
  const data::CategoryRun* it =
      std::upper_bound(b, e, cp, [](uint32_t v, const data::CategoryRun& r) { return v < r.first; });
  if (it == b) return kOther;
  return (it - 1)->cat;
}

bool is_whitespace(uint32_t cp) {
  if (cp < 128) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return std::binary_search(data::kWhitespace, data::kWhitespace + data::kWhitespaceSize, cp);
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const data::CaseRange* b = data::kLowerRanges;
  const data::CaseRange* e = b + data::kLowerRangesSize;
  const data::CaseRange* it =
      std::upper_bound(b, e, cp, [](uint32_t v, const data::CaseRange& r) { return v < r.first; });
  if (it == b) return cp;
  --it;
  if (cp > it->last || (cp - it->first) % static_cast<uint32_t>(it->stride) != 0) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + it->delta);
}

uint32_t nfd_base(uint32_t cp) {
  if (cp < 0xC0) return cp;
  const data::NfdRange* b = data::kNfdRanges;
  const data::NfdRange* e = b + data::kNfdRangesSize;
  const data::NfdRange* it =
      std::upper_bound(b, e, cp, [](uint32_t v, const data::NfdRange& r) { return v < r.first; });
  if (it == b) return cp;
  --it;
  return cp <= it->last ? it->base : cp;
}

bool is_deepseek_letter(uint32_t cp) {
  const data::CodeRange* b = data::kDeepseekLetters;
  const data::CodeRange* e = b + data::kDeepseekLettersSize;
  const data::CodeRange* it =
      std::upper_bound(b, e, cp, [](uint32_t v, const data::CodeRange& r) { return v < r.first; });
  if (it == b) return false;
  --it;
  return cp <= it->last;
}

const char* data_version() { return data::kUnicodeVersion; }

// ---------------------------------------------------------------------------
// UTF-8

size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

uint32_t decode_one(std::string_view s, size_t& pos) {
  const size_t n = s.size();
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  size_t len = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {  // continuation byte or 0xF8..0xFF
    pos += 1;
    return kReplacement;
  }
  if (pos + len > n) {
    pos += 1;
    return kReplacement;
  }
  for (size_t i = 1; i < len; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) {
      pos += 1;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp > 0x10FFFF) {
    pos += 1;
    return kReplacement;
  }
  pos += len;
  return cp;
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(decode_one(s, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = kReplacement;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

std::string encode(const uint32_t* cps, size_t n) {
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) append_utf8(s, cps[i]);
  return s;
}

// ---------------------------------------------------------------------------
// GPT-2 byte-level mapping: printable Latin-1 bytes map to themselves, the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen, ...) to U+0100 on,
// in byte order.

namespace {

struct ByteMap {
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 324> from_cp;  // code points 0..323
  ByteMap() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      to_utf8[b] = encode(cp);
      from_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_utf8(uint8_t b) { return byte_map().to_utf8[b]; }

std::optional<uint8_t> utf8_to_byte(uint32_t cp) {
  const ByteMap& m = byte_map();
  if (cp >= m.from_cp.size() || m.from_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(m.from_cp[cp]);
}

std::string byte_encode(std::string_view s) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += m.to_utf8[static_cast<uint8_t>(c)];
  return out;
}

// ---------------------------------------------------------------------------
// Pre-tokenizers.
//
// llama.cpp runs a list of regexes per pre-tokenizer type; each regex splits
// every piece the previous one produced into its matches and the unmatched
// gaps between them. Here each regex is a hand-written matcher that returns
// the length of the (leftmost-alternative, greedy, backtracking) match at a
// position, or 0. Character classes follow llama.cpp's evaluation: \p{L},
// \p{N}, \p{P}, \p{M} by general category, \s by White_Space, and for the
// regexes it runs on raw code points a non-ASCII whitespace character only
// matches \s (it is replaced by U+000B there).

namespace {

struct Span {
  const uint32_t* c;
  size_t end;
};

// A matcher returns the match length at pos (0: none). When there is no
// match it may raise *next to skip positions that cannot start a match.
using Matcher = size_t (*)(const Span& t, size_t pos, size_t* next);

inline bool is_l(uint32_t cp) { return category(cp) == kLetter; }
inline bool is_n(uint32_t cp) { return category(cp) == kNumber; }
inline bool is_p(uint32_t cp) { return category(cp) == kPunct; }
inline bool is_ws(uint32_t cp) { return is_whitespace(cp); }
inline bool is_other(uint32_t cp) { return !is_ws(cp) && !is_l(cp) && !is_n(cp); }  // [^\s\p{L}\p{N}]
// Raw-code-point regexes see non-ASCII whitespace as U+000B.
inline uint32_t raw(uint32_t cp) { return (cp >= 128 && is_whitespace(cp)) ? 0x0B : cp; }

template <typename Pred>
inline size_t run_from(const Span& t, size_t q, Pred pred) {
  while (q < t.end && pred(t.c[q])) ++q;
  return q;
}

// X{1,max} from q (q itself when t.c[q] is not X)
template <typename Pred>
inline size_t run_upto(const Span& t, size_t q, Pred pred, size_t max) {
  const size_t end = std::min(t.end, q + max);
  while (q < end && pred(t.c[q])) ++q;
  return q;
}

inline bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// 's|'t|'re|'ve|'m|'ll|'d (optionally case-insensitive); returns length or 0.
size_t contraction(const Span& t, size_t pos, bool icase) {
  if (t.c[pos] != '\'' || pos + 1 >= t.end) return 0;
  const auto low = [&](uint32_t cp) { return icase ? to_lower(cp) : cp; };
  const uint32_t a = low(t.c[pos + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < t.end) {
    const uint32_t b = low(t.c[pos + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// Whitespace tail shared by the llama3-style regexes:
// \s*[\r\n]+ | \s+(?!\S) | \s+   (with_newline = false drops the first one)
size_t whitespace_tail(const Span& t, size_t pos, bool with_newline) {
  size_t n = 0;
  size_t last_nl = 0;
  while (pos + n < t.end && is_ws(t.c[pos + n])) {
    const uint32_t cp = t.c[pos + n];
    if (cp == '\r' || cp == '\n') last_nl = pos + n + 1;
    ++n;
  }
  if (with_newline && last_nl > 0) return last_nl - pos;
  if (n > 1 && pos + n < t.end) return n - 1;
  return n;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t m_gpt2(const Span& t, size_t pos, size_t*) {
  if (size_t n = contraction(t, pos, false)) return n;
  const uint32_t cp = t.c[pos];
  const size_t q = pos + (cp == ' ' ? 1 : 0);
  if (q < t.end) {
    const uint32_t c2 = t.c[q];
    if (is_l(c2)) return run_from(t, q, is_l) - pos;
    if (is_n(c2)) return run_from(t, q, is_n) - pos;
    if (is_other(c2)) return run_from(t, q, is_other) - pos;
  }
  const size_t n = whitespace_tail(t, pos, false);
  return n > 0 ? n : 1;
}

// The llama3 family: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?W+|\p{N}{1,MAX}|
//   ?[^\sW\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with the word class W = \p{L} (llama3, qwen2) or [\p{L}\p{M}] (qwen35).
template <size_t kMaxDigits, bool (*Word)(uint32_t)>
size_t m_llama3(const Span& t, size_t pos, size_t*) {
  if (size_t n = contraction(t, pos, true)) return n;
  const uint32_t cp = t.c[pos];
  if (!(is_crlf(cp) || is_n(cp))) {
    if (Word(cp) || (pos + 1 < t.end && Word(t.c[pos + 1]))) return run_from(t, pos + 1, Word) - pos;
  }
  if (is_n(cp)) return run_upto(t, pos, is_n, kMaxDigits) - pos;
  const auto other = [](uint32_t c) { return !is_ws(c) && !Word(c) && !is_n(c); };
  size_t q = pos + (cp == ' ' ? 1 : 0);
  if (q >= t.end || other(t.c[q])) {
    q = run_from(t, q, other);
    q = run_from(t, q, is_crlf);
    return q - pos;
  }
  const size_t n = whitespace_tail(t, pos, true);
  return n > 0 ? n : 1;
}

// Cased words (tekken, gpt-4o):
// [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,MAX}| ?[^\s\p{L}\p{N}]+[\r\n/]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
// with U = [\p{L}&&[^a-z]] and L = [\p{L}&&[^A-Z]] (a letter outside ASCII is
// both), C = (?i:'s|'t|'re|'ve|'m|'ll|'d) for gpt-4o and nothing for tekken.
inline bool tk_upper(uint32_t cp) { return is_l(cp) && !(cp >= 'a' && cp <= 'z'); }
inline bool tk_lower(uint32_t cp) { return is_l(cp) && !(cp >= 'A' && cp <= 'Z'); }

size_t tk_core1(const Span& t, size_t s) {  // U* L+ ; returns end or 0
  const size_t max_u = run_from(t, s, tk_upper);
  for (size_t k = max_u;; --k) {
    if (k < t.end && tk_lower(t.c[k])) return run_from(t, k, tk_lower);
    if (k == s) break;
  }
  return 0;
}

size_t tk_core2(const Span& t, size_t s) {  // U+ L*
  if (s >= t.end || !tk_upper(t.c[s])) return 0;
  return run_from(t, run_from(t, s, tk_upper), tk_lower);
}

// End of the cased word at pos (the first alternative that matches), or 0.
size_t cased_word(const Span& t, size_t pos) {
  const uint32_t cp = t.c[pos];
  const bool prefix = !(is_crlf(cp) || is_l(cp) || is_n(cp)) && pos + 1 < t.end;
  if (prefix) {
    if (size_t e = tk_core1(t, pos + 1)) return e;
  }
  if (size_t e = tk_core1(t, pos)) return e;
  if (prefix) {
    if (size_t e = tk_core2(t, pos + 1)) return e;
  }
  return tk_core2(t, pos);
}

template <size_t kMaxDigits, bool kContractions>
size_t m_cased(const Span& t, size_t pos, size_t*) {
  if (size_t e = cased_word(t, pos)) {
    if (kContractions && e < t.end) e += contraction(t, e, true);
    return e - pos;
  }
  const uint32_t cp = t.c[pos];
  if (is_n(cp)) return run_upto(t, pos, is_n, kMaxDigits) - pos;
  size_t q = pos + (cp == ' ' ? 1 : 0);
  if (q < t.end && is_other(t.c[q])) {
    q = run_from(t, q, is_other);
    q = run_from(t, q, [](uint32_t c) { return is_crlf(c) || c == '/'; });
    return q - pos;
  }
  return whitespace_tail(t, pos, true);
}

// deepseek-v3's words:
// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//  ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (no alternative for digits or other characters: those stay gaps)
inline bool is_ascii_letter(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'); }
inline bool is_ascii_punct(uint32_t cp) {  // [!-/:-@\[-`{-~]
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}
inline bool is_letter_or_mark(uint32_t cp) { return is_l(cp) || category(cp) == kMark; }
inline bool is_punct_or_symbol(uint32_t cp) { return is_p(cp) || category(cp) == kSymbol; }

size_t m_deepseek_v3(const Span& t, size_t pos, size_t*) {
  const uint32_t cp = t.c[pos];
  const bool has_next = pos + 1 < t.end;
  if (is_ascii_punct(cp) && has_next && is_ascii_letter(t.c[pos + 1]))
    return run_from(t, pos + 1, is_ascii_letter) - pos;
  const bool prefix = !(is_crlf(cp) || is_l(cp) || is_punct_or_symbol(cp));
  if (prefix && has_next && is_letter_or_mark(t.c[pos + 1])) return run_from(t, pos + 1, is_letter_or_mark) - pos;
  if (is_letter_or_mark(cp)) return run_from(t, pos, is_letter_or_mark) - pos;
  size_t q = pos + (cp == ' ' ? 1 : 0);
  if (q < t.end && is_punct_or_symbol(t.c[q])) {
    q = run_from(t, q, is_punct_or_symbol);
    return run_from(t, q, is_crlf) - pos;
  }
  return whitespace_tail(t, pos, true);  // 0 when cp is no whitespace
}

// kimi-k2 as llama.cpp's hand-written splitter does it, which is not quite
// Kimi's regex (that one has tekken-like cased words without Han and with
// marks): a run of Han characters; an optional non-letter, non-digit,
// non-newline character, then a run of other letters whatever their case,
// then an optional (?i:'s|'t|'re|'ve|'m|'ll|'d) (marks are no letters here);
// \p{N}{1,3}; then llama3's  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
bool is_han(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0x2CEB0 && cp <= 0x2EBEF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}
inline bool is_kimi_letter(uint32_t cp) { return is_l(cp) && !is_han(cp); }

size_t m_kimi_k2(const Span& t, size_t pos, size_t*) {
  const uint32_t cp = t.c[pos];
  if (is_han(cp)) return run_from(t, pos, is_han) - pos;
  const bool prefix = !(is_crlf(cp) || is_l(cp) || is_n(cp));
  if (is_kimi_letter(cp) || (prefix && pos + 1 < t.end && is_kimi_letter(t.c[pos + 1]))) {
    size_t e = run_from(t, pos + 1, is_kimi_letter);
    if (e < t.end) e += contraction(t, e, true);
    return e - pos;
  }
  if (is_n(cp)) return run_upto(t, pos, is_n, 3) - pos;
  size_t q = pos + (cp == ' ' ? 1 : 0);
  if (q < t.end && is_other(t.c[q])) {
    q = run_from(t, q, is_other);
    return run_from(t, q, is_crlf) - pos;
  }
  const size_t n = whitespace_tail(t, pos, true);
  return n > 0 ? n : 1;
}

// [^\n]+|[\n]+
size_t m_newline_runs(const Span& t, size_t pos, size_t*) {
  const bool newline = t.c[pos] == '\n';
  return run_from(t, pos, [newline](uint32_t c) { return (c == '\n') == newline; }) - pos;
}

// [\r\n]
size_t m_newline(const Span& t, size_t pos, size_t*) { return (t.c[pos] == '\r' || t.c[pos] == '\n') ? 1 : 0; }

// \s?X+ for a class X
template <bool (*X)(uint32_t)>
size_t m_opt_space_run(const Span& t, size_t pos, size_t*) {
  const uint32_t cp = t.c[pos];
  if (is_ws(cp) && pos + 1 < t.end && X(t.c[pos + 1])) return run_from(t, pos + 1, X) - pos;
  if (X(cp)) return run_from(t, pos, X) - pos;
  return 0;
}

// X+ for a class X
template <bool (*X)(uint32_t)>
size_t m_run(const Span& t, size_t pos, size_t*) {
  return run_from(t, pos, X) - pos;
}

// X (one code point)
template <bool (*X)(uint32_t)>
size_t m_one(const Span& t, size_t pos, size_t*) {
  return X(t.c[pos]) ? 1 : 0;
}

// X{1,N}
template <bool (*X)(uint32_t), size_t N>
size_t m_run_upto(const Span& t, size_t pos, size_t*) {
  return run_upto(t, pos, X, N) - pos;
}

bool cls_letter(uint32_t cp) { return is_l(cp); }
bool cls_punct(uint32_t cp) { return is_p(cp); }
bool cls_number(uint32_t cp) { return is_n(cp); }
// [一-龥ࠀ-一가-퟿] on raw code points
bool cls_cjk(uint32_t cp) {
  cp = raw(cp);
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x0800 && cp <= 0x4E00) || (cp >= 0xAC00 && cp <= 0xD7FF);
}
// [一-龥぀-ゟ゠-ヿ] on raw code points (Han, Hiragana, Katakana)
bool cls_deepseek_v3_cjk(uint32_t cp) {
  cp = raw(cp);
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) || (cp >= 0x30A0 && cp <= 0x30FF);
}
bool cls_deepseek_letter(uint32_t cp) { return is_deepseek_letter(raw(cp)); }
// [!-/:-~！-／：-～‘-‟　-。] on raw code points
bool cls_deepseek_punct(uint32_t cp) {
  cp = raw(cp);
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3000 && cp <= 0x3002);
}
// [\p{P}\$\+<=>\^~\|] and falcon's variant that adds the backtick
bool cls_default_punct(uint32_t cp) {
  return is_p(cp) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' || cp == '~' ||
         cp == '|';
}
bool cls_falcon_punct(uint32_t cp) { return cls_default_punct(cp) || cp == '`'; }
// [\p{P}!-/:-@\[-`{-~]
bool cls_chameleon_punct(uint32_t cp) {
  return is_p(cp) || (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}
bool is_ascii_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

// \s?[!-/...]+ with the deepseek classes (the \s is the usual one)
size_t m_deepseek_letters(const Span& t, size_t pos, size_t* n) { return m_opt_space_run<cls_deepseek_letter>(t, pos, n); }
size_t m_deepseek_punct(const Span& t, size_t pos, size_t* n) { return m_opt_space_run<cls_deepseek_punct>(t, pos, n); }

// \s+$
size_t m_trailing_space(const Span& t, size_t pos, size_t* next) {
  const size_t q = run_from(t, pos, is_ws);
  if (q == t.end && q > pos) return q - pos;
  *next = q + 1;  // no position inside this run can reach the end either
  return 0;
}

// [0-9][0-9][0-9]
size_t m_three_digits(const Span& t, size_t pos, size_t*) {
  if (pos + 3 > t.end) return 0;
  for (size_t i = 0; i < 3; ++i)
    if (!is_ascii_digit(t.c[pos + i])) return 0;
  return 3;
}

//  ?[^(\s|.,!?…。，、।۔،)]+
bool cls_bloom(uint32_t cp) {
  cp = raw(cp);
  if (is_ws(cp)) return false;
  switch (cp) {
    case '(': case ')': case '|': case '.': case ',': case '!': case '?':
    case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964: case 0x06D4: case 0x060C:
      return false;
    default:
      return true;
  }
}
size_t m_bloom(const Span& t, size_t pos, size_t*) {
  const uint32_t cp = t.c[pos];
  if (cp == ' ' && pos + 1 < t.end && cls_bloom(t.c[pos + 1])) return run_from(t, pos + 1, cls_bloom) - pos;
  if (cls_bloom(cp)) return run_from(t, pos, cls_bloom) - pos;
  return 0;
}

bool starts_with(const Span& t, size_t pos, std::string_view lit) {
  if (pos + lit.size() > t.end) return false;
  for (size_t i = 0; i < lit.size(); ++i)
    if (t.c[pos + i] != static_cast<uint8_t>(lit[i])) return false;
  return true;
}

// <sentinel:[0-9]+>
size_t m_sentinel(const Span& t, size_t pos, size_t*) {
  if (!starts_with(t, pos, "<sentinel:")) return 0;
  const size_t d = pos + 10;
  const size_t q = run_from(t, d, is_ascii_digit);
  if (q == d || q >= t.end || t.c[q] != '>') return 0;
  return q + 1 - pos;
}

// (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
size_t m_image(const Span& t, size_t pos, size_t*) {
  if (!starts_with(t, pos, "IMGIMG")) return 0;
  size_t q = pos + 6;
  size_t k = 0;
  while (k < 4 && q + k < t.end && t.c[q + k] >= 'A' && t.c[q + k] <= 'I') ++k;
  if (k == 0 || q + k >= t.end || t.c[q + k] != 'Z') return 0;
  return 6 + k + 1;
}

// ([\t\n]|    |  )
size_t m_chameleon_space(const Span& t, size_t pos, size_t*) {
  if (t.c[pos] == '\t' || t.c[pos] == '\n') return 1;
  if (starts_with(t, pos, "    ")) return 4;
  if (starts_with(t, pos, "  ")) return 2;
  return 0;
}

// Splits every piece (lengths in code points, in order) by one regex.
void split_by(const std::vector<uint32_t>& cps, std::vector<size_t>& pieces, Matcher m) {
  std::vector<size_t> out;
  out.reserve(pieces.size() * 2);
  size_t start = 0;
  for (size_t len : pieces) {
    const Span t{cps.data(), start + len};
    size_t gap = start;
    size_t pos = start;
    while (pos < t.end) {
      size_t next = pos + 1;
      const size_t n = m(t, pos, &next);
      if (n > 0) {
        if (pos > gap) out.push_back(pos - gap);
        out.push_back(n);
        pos += n;
        gap = pos;
      } else {
        pos = std::max(next, pos + 1);
      }
    }
    if (gap < t.end) out.push_back(t.end - gap);
    start = t.end;
  }
  pieces.swap(out);
}

std::vector<Matcher> matchers_for(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::Default:
      return {m_run<cls_default_punct>, m_gpt2, m_run<cls_number>, m_three_digits};
    case PreTokenizer::Gpt2:
      return {m_gpt2};
    case PreTokenizer::Llama3:
      return {m_llama3<3, cls_letter>};
    case PreTokenizer::Qwen2:
      return {m_llama3<1, cls_letter>};
    case PreTokenizer::Qwen35:
      return {m_llama3<1, is_letter_or_mark>};
    case PreTokenizer::DeepseekLlm:
      return {m_newline, m_deepseek_letters, m_deepseek_punct, m_trailing_space, m_run<cls_cjk>,
              m_run<cls_number>};
    case PreTokenizer::DeepseekCoder:
      return {m_newline, m_opt_space_run<cls_letter>, m_opt_space_run<cls_punct>, m_run<cls_cjk>,
              m_one<cls_number>};
    case PreTokenizer::Falcon:
      return {m_run<cls_falcon_punct>, m_gpt2, m_three_digits};
    case PreTokenizer::Starcoder:
      return {m_one<cls_number>, m_gpt2};
    case PreTokenizer::Bloom:
      return {m_bloom};
    case PreTokenizer::Viking:
      return {m_bloom, m_one<cls_number>};
    case PreTokenizer::Tekken:
      return {m_cased<1, false>};
    case PreTokenizer::Gpt4o:
      return {m_cased<3, true>};
    case PreTokenizer::DeepseekV3:
      return {m_run_upto<cls_number, 3>, m_run<cls_deepseek_v3_cjk>, m_deepseek_v3};
    case PreTokenizer::KimiK2:
      return {m_kimi_k2};
    case PreTokenizer::NewlineRuns:
      return {m_newline_runs};
    case PreTokenizer::Chameleon:
      return {m_sentinel, m_image, m_chameleon_space, m_one<cls_number>, m_one<cls_chameleon_punct>, m_gpt2};
  }
  return {m_gpt2};
}

}  // namespace

std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer kind) {
  const std::vector<uint32_t> cps = decode(text);
  std::vector<std::string> words;
  if (cps.empty()) return words;
  std::vector<size_t> pieces{cps.size()};
  for (Matcher m : matchers_for(kind)) split_by(cps, pieces, m);
  words.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    words.push_back(encode(cps.data() + start, len));
    start += len;
  }
  return words;
}

}  // namespace qlens::unicode
