// Fuzz target "tokenizers": SentencePiece ("llama") and byte-level BPE
// ("gpt2", under each pre-tokenizer qlens implements) and WordPiece ("bert")
// tokenization of arbitrary bytes, invalid UTF-8 included, then
// detokenization and every token's piece.
//
// Input: byte 0 picks the vocabulary, byte 1's low bits add_special and
// parse_special; the rest is the text. The vocabularies are built here (small
// but with what the algorithms branch on: byte tokens, multi-byte pieces,
// control and user-defined tokens, merges); when ../shared is present the
// real vocabularies of llama.cpp's tokenizer tests are added after them.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qlens/gguf.h"
#include "qlens/vocab.h"

using namespace qlens;

namespace {

struct Vocabs {
  std::vector<std::unique_ptr<Vocab>> list;
};

std::unique_ptr<Vocab> load(const gguf::Writer& w, const std::string& name) {
  const std::string path = fuzz::scratch_path(".vocab." + name + ".gguf");
  w.write(path);
  const auto file = gguf::File::open(path);
  std::unique_ptr<Vocab> v = Vocab::from_gguf(*file);
  std::remove(path.c_str());
  return v;
}

// SentencePiece: <unk> <s> </s>, optionally the 256 byte tokens, pieces with
// and without U+2581, multi-byte UTF-8 pieces, control and user-defined tokens.
std::unique_ptr<Vocab> spm(bool byte_tokens, bool add_space_prefix) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  if (byte_tokens)
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.push_back(buf);
      types.push_back(6);
    }
  const std::string mark = "\xE2\x96\x81";
  const std::vector<std::string> pieces = {
      mark, "a", "b", "c", "e", "h", "l", "o", "t", " ", "\n", "ab", "he", "ll", "llo", "hello", mark + "a",
      mark + "h", mark + "he", mark + "hello", mark + "the", "th", "the", "\xC3\xA9", "caf", "caf\xC3\xA9",
      "\xE6\x97\xA5", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x98\x80", mark + mark, "1", "12", "123", ".", ","};
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    types.push_back(1);
  }
  tokens.push_back("<|im_start|>");
  types.push_back(3);
  tokens.push_back("<tool>");
  types.push_back(4);
  tokens.push_back("unused");
  types.push_back(5);
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i % 17) - 0.25f * static_cast<float>(tokens[i].size());
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::make_bool(add_space_prefix));
  w.set("tokenizer.ggml.add_eos_token", gguf::Value::make_bool(!byte_tokens));
  return load(w, std::string("spm") + (byte_tokens ? "b" : "") + (add_space_prefix ? "s" : ""));
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the
// others for U+0100 onwards.
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte-level BPE: the 256 byte characters, merges building a few words (with
// and without the space mark Ġ), and special tokens.
std::unique_ptr<Vocab> bpe(const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_char(b));
    types.push_back(1);
  }
  const std::string sp = byte_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {sp, "h"}, {sp + "h", "e"}, {sp, "t"}, {"t", "h"},
      {sp + "t", "he"}, {"th", "e"}, {"1", "2"}, {"12", "3"}, {sp, sp}, {byte_char('\n'), byte_char('\n')},
      {byte_char(0xC3), byte_char(0xA9)}, {"w", "o"}, {"r", "ld"}, {"l", "d"}, {"wo", "rld"}, {sp, "wo"}};
  std::vector<std::string> merge_lines;
  for (const auto& [a, b] : merges) {
    merge_lines.push_back(a + " " + b);
    const std::string t = a + b;
    bool seen = false;
    for (const std::string& x : tokens) seen |= x == t;
    if (!seen) {
      tokens.push_back(t);
      types.push_back(1);
    }
  }
  merge_lines.push_back("malformed");  // no pair: skipped
  for (const char* special : {"<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  tokens.push_back("<user>");
  types.push_back(4);
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.model", gguf::Value::make_string("gpt2"));
  if (!pre.empty()) w.set("tokenizer.ggml.pre", gguf::Value::make_string(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array(merge_lines));
  const uint32_t eot = static_cast<uint32_t>(tokens.size() - 5);
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(eot + 1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::make_u32(eot));
  return load(w, "bpe-" + (pre.empty() ? std::string("none") : pre));
}

std::unique_ptr<Vocab> wordpiece() {
  std::vector<std::string> tokens = {"[PAD]"};
  for (int i = 1; i < 100; ++i) tokens.push_back("[unused" + std::to_string(i) + "]");
  for (const char* t : {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "##ing", "play", "a", "b",
                        "c", "##a", "##b", ".", ",", "\xC3\xA9", "caf", "##\xC3\xA9", "\xE6\x97\xA5"})
    tokens.push_back(t);
  std::vector<int32_t> types(tokens.size(), 1);
  types[100] = 2;
  types[101] = types[102] = types[103] = 3;
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string("bert"));
  w.set("tokenizer.ggml.model", gguf::Value::make_string("bert"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  return load(w, "bert");
}

const Vocabs& vocabs() {
  static const Vocabs v = [] {
    Vocabs out;
    out.list.push_back(spm(true, true));
    out.list.push_back(spm(false, true));
    out.list.push_back(spm(true, false));
    for (const char* pre : {"", "default", "llama3", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "gpt-2",
                            "starcoder", "chatglm-bpe", "smaug-bpe", "refact", "command-r", "olmo"}) {
      try {
        out.list.push_back(bpe(pre));
      } catch (const Error&) {  // a pre-tokenizer this qlens does not know
      }
    }
    out.list.push_back(wordpiece());
#ifdef QLENS_SHARED_DIR
    // Real vocabularies, when ../shared is there (loading takes a moment).
    for (const char* name : {"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "deepseek-coder", "falcon",
                             "bert-bge"}) {
      const std::string path = std::string(QLENS_SHARED_DIR) + "/models/llama-vocab/ggml-vocab-" + name + ".gguf";
      if (access(path.c_str(), R_OK) != 0) continue;
      const auto file = gguf::File::open(path);
      out.list.push_back(Vocab::from_gguf(*file));
    }
#endif
    return out;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)vocabs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Vocabs& v = vocabs();
  const Vocab& vocab = *v.list[data[0] % v.list.size()];
  const bool add_special = data[1] & 1, parse_special = data[1] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  std::vector<Token> ids;
  if (!fuzz::expect_error_or_success([&] { ids = vocab.tokenize(text, add_special, parse_special); })) return 0;
  for (Token t : ids)
    if (t < 0 || t >= vocab.n_tokens()) __builtin_trap();  // every id is a token of the vocabulary
  (void)vocab.detokenize(ids);
  for (Token t : ids) (void)vocab.token_to_piece(t);
  return 0;
}
