// Vocabularies from GGUF metadata (tokenizer.ggml.*) and the parts every
// tokenizer shares: token attributes, special-token splitting, pieces and
// detokenization. The merge loops live in vocab_spm.cpp and vocab_bpe.cpp, the
// pre-tokenizers in unicode.cpp. Behaviour follows llama.cpp so that token ids
// agree with it.
#include "qlens/vocab.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "model/unicode.h"
#include "model/vocab_segment.h"
#include "qlens/error.h"

namespace qlens {

namespace {

// Token attributes (llama.cpp's llama_token_attr bits).
enum Attr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLStrip = 1u << 7,
  kAttrRStrip = 1u << 8,
};

// tokenizer.ggml.token_type values
uint32_t attr_from_type(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

const std::string kEscapedSpace = "\xE2\x96\x81";  // U+2581

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

struct PreSpec {
  unicode::PreTokenizer kind;
  bool ignore_merges = false;  // a pre-token that is a token is taken whole
  bool add_bos = false;
  bool no_bos = false;           // chatglm: no default BOS token
  bool merges_optional = false;  // kimi-k2: a vocabulary may come without merges
  // Gemma 4's SentencePiece-style BPE: spaces become U+2581 before splitting,
  // merges run over raw UTF-8 (no byte-level mapping), pieces that are no
  // token fall back to <0xXX> byte tokens, a run of newlines that is a token
  // is taken whole, and BOS is added whatever tokenizer.ggml.add_bos_token says.
  bool spm_style = false;
};

// tokenizer.ggml.pre names llama.cpp accepts for "gpt2" vocabularies that map
// onto the pre-tokenizers implemented here.
std::optional<PreSpec> pre_spec(const std::string& name) {
  using P = unicode::PreTokenizer;
  static const std::unordered_map<std::string, PreSpec> table = {
      {"default", {P::Default}},
      {"llama3", {P::Llama3, true, true}},
      {"llama-v3", {P::Llama3, true, true}},
      {"llama-bpe", {P::Llama3, true, true}},
      {"falcon3", {P::Llama3, true, true}},
      {"falcon-h1", {P::Llama3, true, true}},
      {"pixtral", {P::Llama3, true, true}},
      {"midm-2.0", {P::Llama3, true, true}},
      {"lfm2", {P::Llama3, true, true}},
      {"dbrx", {P::Llama3}},
      {"smaug-bpe", {P::Llama3}},
      {"chatglm-bpe", {P::Llama3, false, false, true}},
      {"glm4", {P::Llama3, false, false, true}},
      {"deepseek-llm", {P::DeepseekLlm}},
      {"deepseek-coder", {P::DeepseekCoder}},
      {"falcon", {P::Falcon}},
      {"mpt", {P::Gpt2}},
      {"gpt-2", {P::Gpt2}},
      {"phi-2", {P::Gpt2}},
      {"jina-es", {P::Gpt2}},
      {"jina-de", {P::Gpt2}},
      {"jina-v2-es", {P::Gpt2}},
      {"jina-v2-de", {P::Gpt2}},
      {"gigachat", {P::Gpt2}},
      {"a.x-4.0", {P::Gpt2}},
      {"mellum", {P::Gpt2}},
      {"exaone4", {P::Gpt2}},
      {"olmo", {P::Gpt2}},
      {"jais", {P::Gpt2}},
      {"trillion", {P::Gpt2}},
      {"granite-docling", {P::Gpt2}},
      {"starcoder", {P::Starcoder}},
      {"refact", {P::Starcoder}},
      {"command-r", {P::Starcoder}},
      {"smollm", {P::Starcoder}},
      {"codeshell", {P::Starcoder}},
      {"exaone", {P::Starcoder}},
      {"minerva-7b", {P::Starcoder}},
      {"qwen2", {P::Qwen2}},
      {"deepseek-r1-qwen", {P::Qwen2}},
      {"megrez", {P::Qwen2}},
      {"stablelm2", {P::Qwen2}},
      {"poro-chat", {P::Bloom}},
      {"bloom", {P::Bloom}},
      {"gpt3-finnish", {P::Bloom}},
      {"viking", {P::Viking}},
      {"tekken", {P::Tekken, true, true}},
      {"chameleon", {P::Chameleon, false, true}},
      {"qwen35", {P::Qwen35}},
      {"gpt-4o", {P::Gpt4o}},
      {"deepseek-v3", {P::DeepseekV3}},
      {"kimi-k2", {.kind = P::KimiK2, .merges_optional = true}},
      // also what tokenizer.ggml.model = "gemma4" means, whatever tokenizer.ggml.pre says
      {"gemma4", {.kind = P::NewlineRuns, .spm_style = true}},
  };
  const auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

// Token texts llama.cpp treats as control tokens whatever their stored type
// (end-of-generation, end-of-turn and fill-in-the-middle markers).
const std::unordered_set<std::string>& control_by_text() {
  static const std::unordered_set<std::string> s = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
      "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "<end_of_utterance>",
      "<|eom_id|>", "<|return|>", "<|call|>", "[EOS]", "</s>", "<eos>", "<turn|>", "<|tool_response>",
      // fill-in-the-middle
      "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
      "\xE2\x96\x81<PRE>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>", "<|fim_middle|>",
      "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
      "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
      "<REPO>", "<reponame>", "<|file_sep|>"};
  return s;
}

class VocabImpl final : public Vocab {
 public:
  explicit VocabImpl(const gguf::File& file) { load(file); }

  std::vector<Token> tokenize(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(Token t) const override;
  VocabKind kind() const override { return kind_; }
  int32_t n_tokens() const override { return static_cast<int32_t>(text_.size()); }
  const std::string& token_text(Token t) const override {
    check_id(t);
    return text_[static_cast<size_t>(t)];
  }
  Token bos() const override { return bos_; }
  Token eos() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }
  bool is_control(Token t) const override {
    return t >= 0 && t < n_tokens() && (attr_[static_cast<size_t>(t)] & kAttrControl) != 0;
  }

  bool add_space_prefix() const { return add_space_prefix_; }

 private:
  struct Fragment {
    Token token;  // -1: raw text [off, off + len)
    size_t off;
    size_t len;
  };

  // The default special token ids of a tokenizer model.
  struct SpecialIds {
    Token bos = -1, eos = -1, unk = -1, sep = -1, pad = -1;
  };

  void load(const gguf::File& file);
  SpecialIds load_model_kind(const gguf::File& f);
  bool set_pre_tokenizer(const std::optional<std::string>& pre);
  void load_tokens(const gguf::File& f);
  void load_merges(const gguf::File& f);
  Token special_id(const gguf::File& f, const char* key, Token def) const;
  void load_special_ids(const gguf::File& f, const SpecialIds& def);
  void load_added_tokens(const gguf::File& f);
  void fix_up_attributes(const gguf::File& f);
  void strip_after_specials();
  void map_byte_tokens(bool raw_byte_fallback);
  [[noreturn]] void fail(const std::string& what) const { throw Error(path_ + ": " + what); }
  void check_id(Token t) const {
    if (t < 0 || t >= n_tokens())
      throw Error("token id " + std::to_string(t) + " is out of range (vocabulary of " +
                  std::to_string(n_tokens()) + " tokens from " + path_ + ")");
  }
  Token find(std::string_view s) const {
    const auto it = to_id_.find(std::string(s));
    return it == to_id_.end() ? -1 : it->second;
  }
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void tokenize_spm(std::string_view text, std::vector<Token>& out) const;
  void tokenize_bpe(std::string_view text, std::vector<Token>& out) const;
  bool taken_whole(std::string_view word) const;
  void bpe_byte_fallback(std::string_view piece, std::vector<Token>& out) const;
  void tokenize_wpm(std::string_view text, std::vector<Token>& out) const;
  std::vector<std::string> wpm_words(std::string_view text) const;

  std::string path_;
  VocabKind kind_ = VocabKind::SentencePiece;
  std::vector<std::string> text_;
  std::vector<float> score_;
  std::vector<uint32_t> attr_;
  std::unordered_map<std::string, Token> to_id_;
  std::vector<Token> specials_;  // control/user-defined/unknown tokens, longest text first
  size_t max_token_len_ = 0;

  Token bos_ = -1, eos_ = -1, unk_ = -1, sep_ = -1, pad_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;

  // SentencePiece and SentencePiece-style BPE
  std::vector<Token> byte_tokens_;  // byte -> <0xXX> token (or -1)
  // BPE
  PreSpec bpe_{unicode::PreTokenizer::Default};
  std::unordered_map<std::string, int> ranks_;  // "left right" -> rank
  // WordPiece
  bool lowercase_ = true;
  bool strip_accents_ = true;
};

// ---------------------------------------------------------------------------
// Loading

std::optional<bool> try_bool(const gguf::File& f, std::string_view key) {
  const std::optional<int64_t> v = f.try_int(key);
  if (!v) return std::nullopt;
  return *v != 0;
}

void VocabImpl::load(const gguf::File& f) {
  path_ = f.path();
  const SpecialIds defaults = load_model_kind(f);
  if (const std::optional<bool> v = try_bool(f, "tokenizer.ggml.add_space_prefix")) add_space_prefix_ = *v;
  load_tokens(f);
  if (kind_ == VocabKind::BytePairEncoding) load_merges(f);
  load_special_ids(f, defaults);
  load_added_tokens(f);
  fix_up_attributes(f);
  if (kind_ == VocabKind::SentencePiece || bpe_.spm_style) map_byte_tokens(kind_ == VocabKind::SentencePiece);
}

// The tokenizer model, its defaults and, for "gpt2", its pre-tokenizer.
// "gemma4" is BPE with Gemma 4's own pre-tokenizer and no default special tokens.
VocabImpl::SpecialIds VocabImpl::load_model_kind(const gguf::File& f) {
  const std::optional<std::string> model = f.try_string("tokenizer.ggml.model");
  if (!model) fail("key 'tokenizer.ggml.model' is missing: the file has no tokenizer");
  const std::optional<std::string> pre = f.try_string("tokenizer.ggml.pre");
  SpecialIds def;
  if (*model == "llama") {
    kind_ = VocabKind::SentencePiece;
    def.bos = 1;
    def.eos = 2;
    def.unk = 0;
    add_space_prefix_ = true;
    add_bos_ = true;
  } else if (*model == "gpt2") {
    kind_ = VocabKind::BytePairEncoding;
    def.bos = 11;
    def.eos = 11;
    if (set_pre_tokenizer(pre)) def.bos = -1;
  } else if (*model == "gemma4") {
    kind_ = VocabKind::BytePairEncoding;
    set_pre_tokenizer(std::string("gemma4"));
  } else if (*model == "bert") {
    kind_ = VocabKind::WordPiece;
    def.bos = 101;
    def.unk = 100;
    def.sep = 102;
    def.pad = 0;
    add_bos_ = true;
  } else {
    fail("unsupported tokenizer model 'tokenizer.ggml.model' = " + quote(*model) +
         " (supported: llama, gpt2, gemma4, bert)");
  }
  return def;
}

// Returns whether the pre-tokenizer drops the default BOS token.
bool VocabImpl::set_pre_tokenizer(const std::optional<std::string>& pre) {
  PreSpec spec{unicode::PreTokenizer::Default};
  if (pre && !pre->empty()) {
    const std::optional<PreSpec> s = pre_spec(*pre);
    if (!s) fail("unsupported pre-tokenizer 'tokenizer.ggml.pre' = " + quote(*pre));
    spec = *s;
  }
  // a missing tokenizer.ggml.pre means "default", as in llama.cpp
  bpe_ = spec;
  add_bos_ = spec.add_bos;
  return spec.no_bos;
}

// tokens, scores, types
void VocabImpl::load_tokens(const gguf::File& f) {
  std::optional<std::vector<std::string>> tokens = f.try_string_array("tokenizer.ggml.tokens");
  if (!tokens) fail("key 'tokenizer.ggml.tokens' is missing");
  if (tokens->empty()) fail("key 'tokenizer.ggml.tokens' is an empty array: the vocabulary has no tokens");
  if (tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("key 'tokenizer.ggml.tokens' has " + std::to_string(tokens->size()) + " tokens, too many");
  const size_t n = tokens->size();

  std::optional<std::vector<float>> scores = f.try_float_array("tokenizer.ggml.scores");
  if (scores && scores->size() != n)
    fail("key 'tokenizer.ggml.scores' has " + std::to_string(scores->size()) + " entries but 'tokenizer.ggml.tokens' has " +
         std::to_string(n));
  std::optional<std::vector<int64_t>> types = f.try_int_array("tokenizer.ggml.token_type");
  if (types && types->size() != n)
    fail("key 'tokenizer.ggml.token_type' has " + std::to_string(types->size()) +
         " entries but 'tokenizer.ggml.tokens' has " + std::to_string(n));

  text_ = std::move(*tokens);
  score_.assign(n, 0.0f);
  if (scores) score_ = std::move(*scores);
  attr_.assign(n, kAttrNormal);
  to_id_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    if (types) attr_[i] = attr_from_type((*types)[i]);
    std::string& word = text_[i];
    if (word.empty()) word = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp: keeps matching sane
    const auto [it, inserted] = to_id_.emplace(word, static_cast<Token>(i));
    if (!inserted)
      fail("duplicate token in 'tokenizer.ggml.tokens': " + quote(word) + " has ids " + std::to_string(it->second) +
           " and " + std::to_string(i));
    max_token_len_ = std::max(max_token_len_, word.size());
  }
}

void VocabImpl::load_merges(const gguf::File& f) {
  std::optional<std::vector<std::string>> merges = f.try_string_array("tokenizer.ggml.merges");
  if (!merges) {
    if (bpe_.merges_optional) return;  // every character a token of its own, or its bytes
    fail("key 'tokenizer.ggml.merges' is missing (needed by a BPE tokenizer)");
  }
  ranks_.reserve(merges->size() * 2);
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size()) continue;  // malformed: no pair
    ranks_.emplace(m, static_cast<int>(std::min<size_t>(i, std::numeric_limits<int>::max())));
  }
}

// A special token id: a default that does not exist is dropped, an explicit
// one must exist.
Token VocabImpl::special_id(const gguf::File& f, const char* key, Token def) const {
  const size_t n = text_.size();
  if (def >= static_cast<Token>(n)) def = -1;
  const std::optional<int64_t> v = f.try_int(key);
  if (!v) return def;
  // -1 (often stored as u32 0xFFFFFFFF) means "no such token", as in llama.cpp.
  if (*v == -1 || *v == 0xFFFFFFFFll) return -1;
  if (*v < 0 || *v >= static_cast<int64_t>(n))
    fail("key '" + std::string(key) + "' = " + std::to_string(*v) + " is out of range (vocabulary of " +
         std::to_string(n) + " tokens)");
  return static_cast<Token>(*v);
}

void VocabImpl::load_special_ids(const gguf::File& f, const SpecialIds& def) {
  bos_ = special_id(f, "tokenizer.ggml.bos_token_id", def.bos);
  eos_ = special_id(f, "tokenizer.ggml.eos_token_id", def.eos);
  unk_ = special_id(f, "tokenizer.ggml.unknown_token_id", def.unk);
  sep_ = special_id(f, "tokenizer.ggml.seperator_token_id", def.sep);
  pad_ = special_id(f, "tokenizer.ggml.padding_token_id", def.pad);
}

// Whether BOS and EOS are added, and that the tokens to add exist.
void VocabImpl::load_added_tokens(const gguf::File& f) {
  if (const std::optional<bool> v = try_bool(f, "tokenizer.ggml.add_bos_token")) add_bos_ = *v;
  if (const std::optional<bool> v = try_bool(f, "tokenizer.ggml.add_eos_token")) add_eos_ = *v;
  if (bpe_.spm_style) add_bos_ = true;  // as llama.cpp does for Gemma 4
  if (add_bos_ && bos_ < 0)
    fail("a BOS token is to be added ('tokenizer.ggml.add_bos_token' or the tokenizer's default) but the "
         "vocabulary has none ('tokenizer.ggml.bos_token_id')");
  if (add_eos_ && eos_ < 0)
    fail("'tokenizer.ggml.add_eos_token' is true but the vocabulary has no EOS token ('tokenizer.ggml.eos_token_id')");
  if (kind_ == VocabKind::WordPiece && (bos_ < 0 || sep_ < 0))
    fail("a 'bert' vocabulary needs CLS (BOS) and SEP tokens");
}

// llama.cpp's by-text fix-ups of token types, then the special tokens
// (longest text first) and Phi-3's whitespace stripping.
void VocabImpl::fix_up_attributes(const gguf::File& f) {
  const size_t n = text_.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = text_[i];
    if (control_by_text().count(t)) attr_[i] |= kAttrControl;
    if (t == "<|channel|>" || t == "<|message|>" || t == "<|start|>" || t == "<|constrain|>")
      attr_[i] = kAttrUserDefined;
  }

  for (size_t i = 0; i < n; ++i)
    if (attr_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) specials_.push_back(static_cast<Token>(i));
  std::stable_sort(specials_.begin(), specials_.end(), [&](Token a, Token b) {
    return text_[static_cast<size_t>(a)].size() > text_[static_cast<size_t>(b)].size();
  });

  if (std::optional<std::string> name = f.try_string("general.name")) {
    std::string low = *name;
    for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low.find("phi-3") != std::string::npos || low.find("phi3") != std::string::npos) strip_after_specials();
  }
}

// Phi-3: special tokens swallow the whitespace that follows them
void VocabImpl::strip_after_specials() {
  for (Token t : specials_) attr_[static_cast<size_t>(t)] |= kAttrRStrip;
  const auto set_rstrip = [&](const char* text, bool on) {
    const Token t = find(text);
    if (t < 0) return;
    if (on)
      attr_[static_cast<size_t>(t)] |= kAttrRStrip;
    else
      attr_[static_cast<size_t>(t)] &= ~static_cast<uint32_t>(kAttrRStrip);
  };
  set_rstrip("</s>", true);
  set_rstrip("<unk>", false);
  set_rstrip("<s>", false);
  set_rstrip("<|endoftext|>", false);
}

// byte -> its <0xXX> token, else (SentencePiece only) the token of the byte itself.
void VocabImpl::map_byte_tokens(bool raw_byte_fallback) {
  byte_tokens_.assign(256, -1);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string name = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    Token t = find(name);
    if (t < 0 && raw_byte_fallback) t = find(std::string(1, static_cast<char>(b)));
    byte_tokens_[static_cast<size_t>(b)] = t;
  }
}

// ---------------------------------------------------------------------------
// Tokenizing

// Splits text at special tokens: control and unknown tokens only when
// parse_special, user-defined tokens always. Longer tokens are matched first.
std::vector<VocabImpl::Fragment> VocabImpl::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (Token id : specials_) {
    const uint32_t attr = attr_[static_cast<size_t>(id)];
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = text_[static_cast<size_t>(id)];
    bool any = false;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0 || text.substr(fr.off, fr.len).find(st) == std::string_view::npos) continue;
      any = true;
      break;
    }
    if (!any) continue;
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t cur = fr.off;
      const size_t end = fr.off + fr.len;
      while (cur < end) {
        const size_t hit = text.substr(0, end).find(st, cur);
        if (hit == std::string_view::npos) {
          next.push_back({-1, cur, end - cur});
          break;
        }
        size_t left_len = hit - cur;
        if (attr & kAttrLStrip)
          while (left_len > 0 && std::isspace(static_cast<unsigned char>(text[cur + left_len - 1]))) --left_len;
        if (left_len > 0) next.push_back({-1, cur, left_len});
        next.push_back({id, 0, 0});
        cur = hit + st.size();
        if (attr & kAttrRStrip)
          while (cur < end && std::isspace(static_cast<unsigned char>(text[cur]))) ++cur;
      }
    }
    frags.swap(next);
  }
  return frags;
}

void VocabImpl::tokenize_spm(std::string_view text, std::vector<Token>& out) const {
  std::string s(text);
  replace_all(s, " ", kEscapedSpace);
  const auto score_of = [this](std::string_view piece) -> std::optional<float> {
    const Token t = find(piece);
    if (t < 0) return std::nullopt;
    return score_[static_cast<size_t>(t)];
  };
  for (std::string_view seg : detail::spm_segment(s, score_of)) {
    const Token t = find(seg);
    if (t >= 0) {
      out.push_back(t);
      continue;
    }
    // byte fallback: <0xXX> tokens; without them the piece is unknown
    const size_t before = out.size();
    bool complete = true;
    for (char c : seg) {
      const Token b = byte_tokens_[static_cast<uint8_t>(c)];
      if (b < 0) {
        complete = false;
        break;
      }
      out.push_back(b);
    }
    if (!complete) {
      out.resize(before);
      if (unk_ >= 0) out.push_back(unk_);
    }
  }
}

void VocabImpl::tokenize_bpe(std::string_view text, std::vector<Token>& out) const {
  const auto rank_of = [this](std::string_view a, std::string_view b) -> int {
    std::string key;
    key.reserve(a.size() + b.size() + 1);
    key.append(a).append(1, ' ').append(b);
    const auto it = ranks_.find(key);
    return it == ranks_.end() ? -1 : it->second;
  };
  std::string escaped;
  if (bpe_.spm_style) {
    escaped = text;
    replace_all(escaped, " ", kEscapedSpace);
    text = escaped;
  }
  for (const std::string& word : unicode::pre_tokenize(text, bpe_.kind)) {
    const std::string enc = bpe_.spm_style ? word : unicode::byte_encode(word);
    if (taken_whole(enc)) {
      const Token t = find(enc);
      if (t >= 0) {
        out.push_back(t);
        continue;
      }
    }
    for (std::string_view seg : detail::bpe_segment(enc, rank_of)) {
      const Token t = find(seg);
      if (t >= 0)
        out.push_back(t);
      else
        bpe_byte_fallback(seg, out);
    }
  }
}

// Pre-tokens looked up whole before merging (when they are tokens): all of
// them with ignore_merges, runs of newlines in Gemma 4.
bool VocabImpl::taken_whole(std::string_view word) const {
  if (bpe_.ignore_merges) return true;
  return bpe_.spm_style && word.find_first_not_of('\n') == std::string_view::npos;
}

// A piece that is no token: llama.cpp looks each of its bytes up on its own
// (byte-level BPE as the byte itself, SentencePiece-style BPE as <0xXX>) and
// drops the misses.
void VocabImpl::bpe_byte_fallback(std::string_view piece, std::vector<Token>& out) const {
  for (char c : piece) {
    const Token b = bpe_.spm_style ? byte_tokens_[static_cast<uint8_t>(c)] : find(std::string_view(&c, 1));
    if (b >= 0) out.push_back(b);
  }
}

bool is_chinese_char(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BERT's basic tokenizer: accent stripping and lowercasing, whitespace split,
// punctuation and CJK characters as words of their own, controls dropped.
std::vector<std::string> VocabImpl::wpm_words(std::string_view text) const {
  std::vector<std::string> words(1);
  for (uint32_t cp : unicode::decode(text)) {
    if (strip_accents_) cp = unicode::nfd_base(cp);
    if (unicode::is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const unicode::Category cat = unicode::category(cp);
    if (cp == 0 || cp == unicode::kReplacement || cat == unicode::kOther) continue;
    if (strip_accents_ && cat == unicode::kMark) continue;
    const std::string s = unicode::encode(lowercase_ ? unicode::to_lower(cp) : cp);
    if (cat == unicode::kPunct || (cp < 0x7F && cat == unicode::kSymbol) || is_chinese_char(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// Greedy longest match; the first piece of a word carries the U+2581 marker
// the GGUF conversion gives word-initial pieces.
void VocabImpl::tokenize_wpm(std::string_view text, std::vector<Token>& out) const {
  for (const std::string& word : wpm_words(text)) {
    if (word.empty()) continue;
    const std::string w = kEscapedSpace + word;
    const size_t n = w.size();
    const size_t before = out.size();
    for (size_t i = 0; i < n;) {
      bool matched = false;
      for (size_t j = std::min(n, i + max_token_len_ + 1); j > i; --j) {
        const Token t = find(std::string_view(w).substr(i, j - i));
        if (t >= 0) {
          out.push_back(t);
          matched = true;
          i = j;
          break;
        }
      }
      if (!matched) {
        out.resize(before);
        break;
      }
    }
    if (out.size() == before && unk_ >= 0) out.push_back(unk_);
  }
}

std::vector<Token> VocabImpl::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<Token> out;
  const std::vector<Fragment> frags = partition(text, parse_special);
  switch (kind_) {
    case VocabKind::SentencePiece: {
      if (add_special && add_bos_) out.push_back(bos_);
      bool prev_special = true;  // the first text fragment gets the space prefix
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) {
          out.push_back(fr.token);
          prev_special = true;
          continue;
        }
        std::string s;
        if (add_space_prefix_ && prev_special) s = " ";
        s.append(text.substr(fr.off, fr.len));
        tokenize_spm(s, out);
        prev_special = false;
      }
      if (add_special && add_eos_) out.push_back(eos_);
      break;
    }
    case VocabKind::BytePairEncoding: {
      if (add_special && add_bos_) out.push_back(bos_);
      for (const Fragment& fr : frags) {
        if (fr.token >= 0)
          out.push_back(fr.token);
        else
          tokenize_bpe(text.substr(fr.off, fr.len), out);
      }
      if (add_special && add_eos_) out.push_back(eos_);
      break;
    }
    case VocabKind::WordPiece: {
      if (add_special) out.push_back(bos_);
      for (const Fragment& fr : frags) {
        if (fr.token >= 0)
          out.push_back(fr.token);
        else
          tokenize_wpm(text.substr(fr.off, fr.len), out);
      }
      if (add_special) out.push_back(sep_);
      break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Pieces

std::string VocabImpl::token_to_piece(Token t) const {
  check_id(t);
  const size_t i = static_cast<size_t>(t);
  const uint32_t attr = attr_[i];
  const std::string& text = text_[i];
  if (attr & (kAttrUnknown | kAttrControl)) return {};
  if (attr & kAttrUserDefined) return text;
  if (attr & kAttrByte) {
    // <0xXX>
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      const auto hexval = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
      };
      const int hi = hexval(text[3]), lo = hexval(text[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return {};
  }
  if (!(attr & kAttrNormal)) return {};
  if (kind_ == VocabKind::BytePairEncoding && !bpe_.spm_style) {
    std::string out;
    out.reserve(text.size());
    for (uint32_t cp : unicode::decode(text)) {
      if (const std::optional<uint8_t> b = unicode::utf8_to_byte(cp)) {
        out.push_back(static_cast<char>(*b));
      } else {  // not a byte-level character: llama.cpp's marker
        static const char* hex = "0123456789abcdef";
        out += "[UNK_BYTE_0x";
        for (unsigned char c : unicode::encode(cp)) {
          out += hex[c >> 4];
          out += hex[c & 15];
        }
        out += text + "]";
      }
    }
    return out;
  }
  std::string out = text;
  replace_all(out, kEscapedSpace, " ");
  return out;
}

}  // namespace

std::unique_ptr<Vocab> Vocab::from_gguf(const gguf::File& file) { return std::make_unique<VocabImpl>(file); }

// Concatenated pieces. Like llama.cpp, a vocabulary that prefixes text with a
// space (SentencePiece) drops one leading space of the first piece, unless the
// sequence starts with a token that prints nothing of its own (BOS).
std::string Vocab::detokenize(std::span<const Token> tokens) const {
  const auto* impl = dynamic_cast<const VocabImpl*>(this);
  bool remove_space = impl != nullptr && impl->add_space_prefix();
  std::string out;
  for (Token t : tokens) {
    std::string piece = token_to_piece(t);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  return out;
}

}  // namespace qlens
