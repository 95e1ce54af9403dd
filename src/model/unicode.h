// Unicode helpers for the tokenizers: UTF-8 decoding/encoding, general
// categories, case and accent folding, GPT-2's byte<->unicode mapping and the
// pre-tokenizers of byte-level BPE vocabularies (hand-written splitters that
// reproduce the regexes llama.cpp applies for each tokenizer.ggml.pre value).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qlens::unicode {

// Major general category (first letter of the Unicode general category).
enum Category : uint8_t {
  kOther = 0,  // C*: control, format, surrogate, private use, unassigned
  kLetter,     // L*
  kMark,       // M*
  kNumber,     // N*
  kPunct,      // P*
  kSymbol,     // S*
  kSeparator,  // Z*
};

Category category(uint32_t cp);       // kOther for cp > 0x10FFFF
bool is_whitespace(uint32_t cp);      // Unicode White_Space
uint32_t to_lower(uint32_t cp);       // first code point of the lowercase mapping
uint32_t nfd_base(uint32_t cp);       // first code point of the canonical decomposition
bool is_deepseek_letter(uint32_t cp);  // the letter class of deepseek-llm's pre-tokenizer
const char* data_version();           // Unicode version the tables were generated from

inline constexpr uint32_t kReplacement = 0xFFFD;

// Byte length of the UTF-8 sequence a lead byte announces, from its high
// nibble alone (1 for ASCII and for stray continuation bytes), like llama.cpp.
size_t utf8_len(uint8_t lead);

// Decodes one code point at `pos`, advancing it. Invalid input (a stray
// continuation byte, a truncated sequence, a lead byte 0xF8..0xFF or a value
// above U+10FFFF) yields U+FFFD and advances one byte. Overlong forms and
// surrogates are decoded as they come, as llama.cpp does.
uint32_t decode_one(std::string_view s, size_t& pos);
std::vector<uint32_t> decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);  // cp > 0x10FFFF -> U+FFFD
std::string encode(uint32_t cp);
std::string encode(const uint32_t* cps, size_t n);

// GPT-2 byte-level mapping: every byte has a printable code point.
const std::string& byte_to_utf8(uint8_t b);
std::optional<uint8_t> utf8_to_byte(uint32_t cp);
// Maps every byte of `s` through byte_to_utf8.
std::string byte_encode(std::string_view s);

// Pre-tokenizers (the regex sets llama.cpp uses per tokenizer.ggml.pre).
enum class PreTokenizer {
  Default,        // "default" and a missing tokenizer.ggml.pre
  Gpt2,           // gpt-2, mpt, olmo, jais, phi-2, ...
  Llama3,         // llama3, llama-bpe, dbrx, smaug-bpe, chatglm-bpe, ...
  Qwen2,          // qwen2, stablelm2 (llama3 with single digits)
  DeepseekLlm,    // deepseek-llm
  DeepseekCoder,  // deepseek-coder
  Falcon,         // falcon
  Starcoder,      // starcoder, refact, command-r, codeshell, exaone, minerva-7b, smollm
  Bloom,          // bloom, poro-chat, gpt3-finnish
  Viking,         // viking
  Tekken,         // tekken
  Chameleon,      // chameleon
  Qwen35,         // qwen35 (qwen2 with combining marks in words)
  Gpt4o,          // gpt-4o (gpt-oss; tekken's cased words with contractions, up to 3 digits)
  DeepseekV3,     // deepseek-v3
  KimiK2,         // kimi-k2
  NewlineRuns,    // gemma4: runs of newlines and runs of everything else
};

// Splits text into pre-tokens (UTF-8, not yet byte-encoded). Invalid UTF-8 is
// replaced by U+FFFD first, as llama.cpp does.
std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer kind);

}  // namespace qlens::unicode

namespace qlens::unicode::data {

struct CategoryRun {
  uint32_t first;
  Category cat;
};
struct CaseRange {
  uint32_t first, last;
  int32_t stride, delta;
};
struct NfdRange {
  uint32_t first, last, base;
};
struct CodeRange {
  uint32_t first, last;
};

extern const char* const kUnicodeVersion;
extern const CategoryRun kCategoryRanges[];
extern const size_t kCategoryRangesSize;
extern const uint32_t kWhitespace[];
extern const size_t kWhitespaceSize;
extern const CaseRange kLowerRanges[];
extern const size_t kLowerRangesSize;
extern const NfdRange kNfdRanges[];
extern const size_t kNfdRangesSize;
extern const CodeRange kDeepseekLetters[];
extern const size_t kDeepseekLettersSize;

}  // namespace qlens::unicode::data
