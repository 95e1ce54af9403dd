// Tokenizer tests: llama.cpp's tokenizer test vocabularies (ids must agree),
// the small pre-tokenizer test vocabularies of tests/data/vocab (ids from
// llama.cpp; tests/data/README.md says how they were made), round trips,
// hostile vocabulary metadata, UTF-8 decoding and the pre-tokenizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "model/unicode.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/vocab.h"
#include "test_util.h"

namespace {

using qlens::Token;
using qlens::Vocab;
namespace gguf = qlens::gguf;
namespace uni = qlens::unicode;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Case {
  std::string text;
  std::vector<Token> expected;
};

// The layout llama.cpp's test-tokenizer-0 reads: cases in NAME.gguf.inp are
// separated by "\n__ggml_vocab_test__\n" (so a case excludes the newline before
// the separator line); NAME.gguf.out holds one line of ids per case.
std::vector<Case> read_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string raw = read_file(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<Token>> outputs;
  std::istringstream out(read_file(out_path));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<Token> ids;
    for (long id; ls >> id;) ids.push_back(static_cast<Token>(id));
    outputs.push_back(ids);
  }
  EXPECT_EQ(inputs.size(), outputs.size()) << inp_path;
  std::vector<Case> cases;
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i) cases.push_back({inputs[i], outputs[i]});
  return cases;
}

std::string ids_text(const std::vector<Token>& ids) {
  std::string s;
  for (Token t : ids) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(t));
  }
  return s;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += static_cast<char>(c);
  }
  return out;
}

struct VocabRun {
  size_t passed = 0;
  size_t total = 0;
  std::string failures;
};

VocabRun run_vocab(const Vocab& vocab, const std::vector<Case>& cases) {
  VocabRun r;
  for (const Case& c : cases) {
    const std::vector<Token> got = vocab.tokenize(c.text, /*add_special=*/false, /*parse_special=*/false);
    ++r.total;
    if (got == c.expected) {
      ++r.passed;
    } else if (r.failures.size() < 4000) {
      r.failures += "  text '" + printable(c.text) + "'\n    expected " + ids_text(c.expected) + "\n    got      " +
                    ids_text(got) + "\n";
    }
  }
  return r;
}

std::unique_ptr<Vocab> load_vocab(const std::string& path) {
  const auto file = gguf::File::open(path);
  return Vocab::from_gguf(*file);
}

// Gtest names for vocabulary names ("gpt-4o" -> "gpt_4o").
std::string test_name(std::string s) {
  for (char& c : s)
    if (c == '-' || c == '.') c = '_';
  return s;
}

const std::string kVocabData = std::string(QLENS_SOURCE_DIR) + "/tests/data/vocab/";

// ---------------------------------------------------------------------------
// llama.cpp's vocabulary test data

struct VocabCases {
  const char* name;
  size_t cases;  // how many cases its .inp holds
};

class VocabData : public ::testing::TestWithParam<VocabCases> {};

TEST_P(VocabData, MatchesLlamaCpp) {
  const std::string name = GetParam().name;
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-" + name + ".gguf");
  const auto t0 = std::chrono::steady_clock::now();
  const auto vocab = load_vocab(path);
  const std::vector<Case> cases = read_cases(path + ".inp", path + ".out");
  ASSERT_EQ(cases.size(), GetParam().cases);
  const VocabRun r = run_vocab(*vocab, cases);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ vocab    ] " << name << ": " << r.passed << "/" << r.total << " cases match (" << ms
            << " ms incl. load)\n";
  EXPECT_EQ(r.passed, r.total) << name << " mismatches:\n" << r.failures;
}

INSTANTIATE_TEST_SUITE_P(Llama, VocabData,
                         ::testing::Values(VocabCases{"llama-spm", 46}, VocabCases{"phi-3", 46},
                                           VocabCases{"gpt-2", 46}, VocabCases{"deepseek-coder", 46},
                                           VocabCases{"deepseek-llm", 46}, VocabCases{"falcon", 46},
                                           VocabCases{"mpt", 46}, VocabCases{"starcoder", 46},
                                           VocabCases{"refact", 46}, VocabCases{"bert-bge", 46},
                                           VocabCases{"llama-bpe", 46}, VocabCases{"qwen2", 46},
                                           VocabCases{"qwen35", 50}, VocabCases{"gemma-4", 46}),
                         [](const ::testing::TestParamInfo<VocabCases>& info) { return test_name(info.param.name); });

// detokenize(tokenize(x)) == x: exactly for byte-level BPE; for SentencePiece
// once the leading space the tokenizer adds is dropped again (detokenize does
// that when the first token is not BOS, as llama.cpp does).
class VocabRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabRoundTrip, DetokenizeInvertsTokenize) {
  const std::string name = GetParam();
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-" + name + ".gguf");
  const auto vocab = load_vocab(path);
  std::vector<std::string> texts;
  for (const Case& c : read_cases(path + ".inp", path + ".out")) texts.push_back(c.text);
  texts.push_back("\xC3\xA9t\xC3\xA9 na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC 100 \xF0\x9F\x98\x80\n\ttab");
  for (const std::string& text : texts) {
    const std::vector<Token> ids = vocab->tokenize(text, false, false);
    EXPECT_EQ(vocab->detokenize(ids), text) << name << ": '" << printable(text) << "' -> " << ids_text(ids);
  }
}

INSTANTIATE_TEST_SUITE_P(Llama, VocabRoundTrip,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
                                           "mpt", "starcoder", "refact", "llama-bpe", "qwen2", "qwen35", "gemma-4"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return test_name(info.param); });

// ---------------------------------------------------------------------------
// The pre-tokenizer test vocabularies of tests/data/vocab: made so that their
// token ids show where the text was split, with llama.cpp's ids for the hard
// strings of strings.inp (tests/data/README.md says how they were made).

class PreTokenizerVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(PreTokenizerVocab, MatchesLlamaCpp) {
  const std::string name = GetParam();
  const auto vocab = load_vocab(kVocabData + name + ".gguf");
  const std::vector<Case> cases = read_cases(kVocabData + "strings.inp", kVocabData + name + ".out");
  ASSERT_EQ(cases.size(), 47u);
  const VocabRun r = run_vocab(*vocab, cases);
  EXPECT_EQ(r.passed, r.total) << name << " mismatches:\n" << r.failures;
  for (const Case& c : cases) {
    const std::vector<Token> ids = vocab->tokenize(c.text, false, false);
    EXPECT_EQ(vocab->detokenize(ids), c.text) << name << ": '" << printable(c.text) << "' -> " << ids_text(ids);
  }
}

INSTANTIATE_TEST_SUITE_P(Data, PreTokenizerVocab,
                         ::testing::Values("gpt-4o", "deepseek-v3", "kimi-k2", "kimi-k2-no-merges"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return test_name(info.param); });

// The same strings with the real qwen35 and Gemma 4 vocabularies, and Gemma
// 4's own cases (long newline runs, spaces, a literal U+2581, byte fallback,
// invalid UTF-8, special tokens as text).
class SharedVocabStrings : public ::testing::TestWithParam<const char*> {};

TEST_P(SharedVocabStrings, MatchesLlamaCpp) {
  const std::string name = GetParam();
  const std::string vocab_name = name == "gemma-4-extra" ? "gemma-4" : name;
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-" + vocab_name + ".gguf");
  const auto vocab = load_vocab(path);
  const std::string inp = name == "gemma-4-extra" ? "gemma-4-extra.inp" : "strings.inp";
  const std::vector<Case> cases = read_cases(kVocabData + inp, kVocabData + name + ".out");
  ASSERT_FALSE(cases.empty());
  const VocabRun r = run_vocab(*vocab, cases);
  EXPECT_EQ(r.passed, r.total) << name << " mismatches:\n" << r.failures;
}

INSTANTIATE_TEST_SUITE_P(Data, SharedVocabStrings, ::testing::Values("qwen35", "gemma-4", "gemma-4-extra"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return test_name(info.param); });

// Gemma 4 ("gemma4"): SentencePiece-style BPE over raw UTF-8 with <0xXX> byte
// fallback; BOS always added; pieces turn U+2581 back into spaces.
TEST(Vocab, Gemma4) {
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-gemma-4.gguf");
  const auto v = load_vocab(path);
  EXPECT_EQ(v->kind(), qlens::VocabKind::BytePairEncoding);
  EXPECT_EQ(v->bos(), 2);
  EXPECT_EQ(v->eos(), 1);
  EXPECT_TRUE(v->add_bos());
  EXPECT_EQ(v->tokenize("Hello world", true), std::vector<Token>({2, 9259, 1902}));
  EXPECT_EQ(v->token_to_piece(1902), " world");
  EXPECT_EQ(v->token_to_piece(107), "\n");
  EXPECT_EQ(v->token_to_piece(238 + 0x41), "A");  // <0x41>
  EXPECT_EQ(v->token_to_piece(2), "");
  // a character that is no token comes back from its byte tokens
  const std::string rare = "x \xF0\xAA\x9B\x96 \xEA\x99\xAE";  // U+2A6D6, U+A66E
  const std::vector<Token> ids = v->tokenize(rare, false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 238 + 0xF0), ids.end()) << ids_text(ids);
  EXPECT_EQ(v->detokenize(ids), rare);
  // llama.cpp makes <|tool_response> (user-defined in the file) a control
  // token: text unless parse_special, unlike the user-defined <tool_response|>
  EXPECT_TRUE(v->is_control(50));
  EXPECT_EQ(v->tokenize("<|tool_response>", false, true), std::vector<Token>({50}));
  EXPECT_EQ(v->tokenize("<tool_response|>", false, false), std::vector<Token>({51}));
}

// Vocabularies without expected ids: they load, and the test strings of
// llama-spm round-trip (gpt-neox has no tokenizer.ggml.pre: llama.cpp's "default").
TEST(Vocab, OtherVocabulariesRoundTrip) {
  QLENS_REQUIRE_SHARED(inp, "models/llama-vocab/ggml-vocab-llama-spm.gguf");
  std::vector<std::string> texts;
  for (const Case& c : read_cases(inp + ".inp", inp + ".out")) texts.push_back(c.text);
  for (const char* name : {"baichuan", "gpt-neox"}) {
    QLENS_REQUIRE_SHARED(path, std::string("models/llama-vocab/ggml-vocab-") + name + ".gguf");
    const auto v = load_vocab(path);
    for (const std::string& text : texts) {
      const std::vector<Token> ids = v->tokenize(text, false, false);
      EXPECT_EQ(v->detokenize(ids), text) << name << ": '" << printable(text) << "' -> " << ids_text(ids);
    }
  }
}

TEST(Vocab, SentencePieceSpecials) {
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-llama-spm.gguf");
  const auto v = load_vocab(path);
  EXPECT_EQ(v->kind(), qlens::VocabKind::SentencePiece);
  EXPECT_EQ(v->n_tokens(), 32000);
  EXPECT_EQ(v->bos(), 1);
  EXPECT_EQ(v->eos(), 2);
  EXPECT_TRUE(v->add_bos());
  EXPECT_TRUE(v->is_control(1));
  EXPECT_FALSE(v->is_control(15043));
  EXPECT_EQ(v->token_text(15043), "\xE2\x96\x81Hello");

  // BOS only when asked; the empty text gives no tokens at all without it
  EXPECT_TRUE(v->tokenize("", false).empty());
  EXPECT_EQ(v->tokenize("", true), std::vector<Token>({1}));
  EXPECT_EQ(v->tokenize("Hello world", true), std::vector<Token>({1, 15043, 3186}));

  // control text is plain text unless parse_special
  const std::vector<Token> plain = v->tokenize("<s>Hello", false, false);
  EXPECT_NE(plain.front(), 1);
  EXPECT_EQ(v->tokenize("<s>Hello", false, true), std::vector<Token>({1, 15043}));
  EXPECT_EQ(v->detokenize(plain), "<s>Hello");

  // pieces: U+2581 -> space, byte tokens -> the byte, control -> nothing
  EXPECT_EQ(v->token_to_piece(15043), " Hello");
  EXPECT_EQ(v->token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(v->token_to_piece(1), "");
  EXPECT_EQ(v->token_to_piece(0), "");  // <unk>
  // after BOS the leading space stays (llama.cpp's detokenize does the same)
  EXPECT_EQ(v->detokenize(v->tokenize("Hello world", true)), " Hello world");
  EXPECT_EQ(v->detokenize(v->tokenize("Hello world", false)), "Hello world");

  // invalid UTF-8 survives through <0xXX> byte tokens (a truncated sequence
  // right before a space would swallow bytes of its U+2581, as in llama.cpp,
  // which groups bytes by what the lead byte announces)
  const std::string junk = "a\xFFxyz\xC3zz \x80" "b \xE2\x82zz";
  EXPECT_EQ(v->detokenize(v->tokenize(junk, false)), junk);
  const std::string cut = "x\xC3 y";
  EXPECT_EQ(v->detokenize(v->tokenize(cut, false)), "x\xC3\xE2\x96\x81y");

  EXPECT_THROW(v->token_to_piece(32000), qlens::Error);
  EXPECT_THROW(v->token_to_piece(-1), qlens::Error);
  EXPECT_FALSE(v->is_control(-5));
}

TEST(Vocab, BytePairSpecials) {
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-gpt-2.gguf");
  const auto v = load_vocab(path);
  EXPECT_EQ(v->kind(), qlens::VocabKind::BytePairEncoding);
  EXPECT_EQ(v->bos(), 50256);
  EXPECT_FALSE(v->add_bos());
  EXPECT_EQ(v->tokenize("Hello world", true), v->tokenize("Hello world", false));
  EXPECT_EQ(v->tokenize("a<|endoftext|>b", false, true), std::vector<Token>({64, 50256, 65}));
  EXPECT_NE(v->tokenize("a<|endoftext|>b", false, false).size(), 3u);
  EXPECT_EQ(v->token_to_piece(50256), "");
  EXPECT_EQ(v->token_to_piece(220), " ");
  // invalid UTF-8 reaches the model as U+FFFD, as in llama.cpp
  const std::vector<Token> bad = v->tokenize(std::string("a\xFF" "b"), false);
  EXPECT_EQ(v->detokenize(bad), "a\xEF\xBF\xBD" "b");
}

TEST(Vocab, UserDefinedTokensAlwaysSplit) {
  // mpt's runs of spaces are user-defined tokens: matched even without parse_special
  QLENS_REQUIRE_SHARED(path, "models/llama-vocab/ggml-vocab-mpt.gguf");
  const auto v = load_vocab(path);
  const std::vector<Token> ids = v->tokenize("a      b", false, false);
  bool has_user = false;
  for (Token t : ids) has_user |= v->token_text(t) == std::string(5, ' ') || v->token_text(t) == std::string(6, ' ');
  EXPECT_TRUE(has_user) << ids_text(ids);
  EXPECT_EQ(v->detokenize(ids), "a      b");
}

// ---------------------------------------------------------------------------
// Hostile metadata

class HostileVocab : public ::testing::Test {
 protected:
  gguf::Writer base(const std::string& model = "llama") {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::make_string("llama"));
    w.set("tokenizer.ggml.model", gguf::Value::make_string(model));
    w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({"<unk>", "<s>", "</s>", "a", "b", "ab"}));
    w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array({0, 0, 0, -1, -2, -0.5f}));
    w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array({2, 3, 3, 1, 1, 1}));
    return w;
  }
  // Loads and returns the error text ("" when it loads).
  std::string load_error(const gguf::Writer& w, const std::string& name) {
    const std::string path = qlens::test::temp_dir() + "/" + name + ".gguf";
    w.write(path);
    try {
      const auto file = gguf::File::open(path);
      const auto v = Vocab::from_gguf(*file);
      return "";
    } catch (const qlens::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << "error does not name the file: " << msg;
      return msg;
    }
  }
};

TEST_F(HostileVocab, WellFormedLoads) {
  const std::string path = qlens::test::temp_dir() + "/ok.gguf";
  base().write(path);
  const auto file = gguf::File::open(path);
  const auto v = Vocab::from_gguf(*file);
  // "\xE2\x96\x81" (the space prefix) is no piece and there are no byte tokens: <unk>
  EXPECT_EQ(v->tokenize("ab", false), std::vector<Token>({0, 5}));
  EXPECT_EQ(v->tokenize("ab", true), std::vector<Token>({1, 0, 5}));
  EXPECT_EQ(v->detokenize(std::vector<Token>{3, 4}), "ab");
}

TEST_F(HostileVocab, MismatchedScores) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array({0, 0, 0}));
  const std::string e = load_error(w, "scores");
  EXPECT_NE(e.find("tokenizer.ggml.scores"), std::string::npos) << e;
}

TEST_F(HostileVocab, MismatchedTokenTypes) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array({1, 1, 1, 1, 1, 1, 1, 1}));
  const std::string e = load_error(w, "types");
  EXPECT_NE(e.find("tokenizer.ggml.token_type"), std::string::npos) << e;
}

TEST_F(HostileVocab, BosOutOfRange) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(6));
  const std::string e = load_error(w, "bos");
  EXPECT_NE(e.find("bos_token_id"), std::string::npos) << e;
  gguf::Writer w2 = base();
  w2.set("tokenizer.ggml.eos_token_id", gguf::Value::make_i32(-3));
  EXPECT_NE(load_error(w2, "eos").find("eos_token_id"), std::string::npos);
}

TEST_F(HostileVocab, UnknownModel) {
  const std::string e = load_error(base("sentencepiece-v9"), "model");
  EXPECT_NE(e.find("sentencepiece-v9"), std::string::npos) << e;
}

TEST_F(HostileVocab, MissingModel) {
  gguf::Writer w = base();
  w.remove("tokenizer.ggml.model");
  EXPECT_NE(load_error(w, "nomodel").find("tokenizer.ggml.model"), std::string::npos);
}

TEST_F(HostileVocab, EmptyVocab) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({}));
  w.remove("tokenizer.ggml.scores");
  w.remove("tokenizer.ggml.token_type");
  EXPECT_NE(load_error(w, "empty").find("empty"), std::string::npos);
  gguf::Writer w2 = base();
  w2.remove("tokenizer.ggml.tokens");
  EXPECT_NE(load_error(w2, "notokens").find("tokenizer.ggml.tokens"), std::string::npos);
}

TEST_F(HostileVocab, WrongTypes) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.tokens", gguf::Value::make_f32_array({1, 2, 3}));
  EXPECT_NE(load_error(w, "tokentype").find("tokenizer.ggml.tokens"), std::string::npos);
  gguf::Writer w2 = base();
  w2.set("tokenizer.ggml.model", gguf::Value::make_u32(7));
  EXPECT_NE(load_error(w2, "modeltype").find("tokenizer.ggml.model"), std::string::npos);
}

TEST_F(HostileVocab, DuplicateToken) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({"<unk>", "<s>", "</s>", "a", "a", "ab"}));
  EXPECT_NE(load_error(w, "dup").find("duplicate"), std::string::npos);
}

TEST_F(HostileVocab, BpeNeedsMergesAndKnownPre) {
  gguf::Writer w = base("gpt2");
  EXPECT_NE(load_error(w, "nomerges").find("tokenizer.ggml.merges"), std::string::npos);
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({"a b", "garbage"}));
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("no-such-pre"));
  EXPECT_NE(load_error(w, "badpre").find("no-such-pre"), std::string::npos);
  w.remove("tokenizer.ggml.pre");  // missing pre: "default", as llama.cpp
  EXPECT_EQ(load_error(w, "defaultpre"), "");
}

TEST_F(HostileVocab, UnknownPreTokenizerNames) {
  gguf::Writer w = base("gpt2");
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({"a b"}));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(1));  // gemma4 always adds BOS
  for (const char* name : {"gpt4o", "GPT-4O", "deepseek-v4", "kimi", "qwen3.5", "gemma-4"}) {
    w.set("tokenizer.ggml.pre", gguf::Value::make_string(name));
    const std::string e = load_error(w, "pre");
    EXPECT_NE(e.find("unsupported pre-tokenizer"), std::string::npos) << name << ": " << e;
    EXPECT_NE(e.find(std::string("'") + name + "'"), std::string::npos) << name << ": " << e;
  }
  for (const char* name : {"gpt-4o", "deepseek-v3", "kimi-k2", "qwen35", "gemma4"}) {
    w.set("tokenizer.ggml.pre", gguf::Value::make_string(name));
    EXPECT_EQ(load_error(w, "pre"), "") << name;
  }
}

TEST_F(HostileVocab, OnlyKimiK2GoesWithoutMerges) {
  gguf::Writer w = base("gpt2");
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("kimi-k2"));
  EXPECT_EQ(load_error(w, "kimi"), "");
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("gpt-4o"));
  EXPECT_NE(load_error(w, "gpt4o").find("tokenizer.ggml.merges"), std::string::npos);
}

// A tiny "gemma4" vocabulary; llama.cpp 0c1e570 gives the same ids for these
// texts (tests/data/README.md).
TEST_F(HostileVocab, Gemma4) {
  gguf::Writer w = base("gemma4");
  w.set("tokenizer.ggml.tokens",
        gguf::Value::make_string_array({"<unk>", "<s>", "</s>", "a", "b", "ab", "<0x63>", "\n", "\n\n"}));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array({0, 0, 0, 0, 0, 0, 0, 0, 0}));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array({2, 3, 3, 1, 1, 1, 6, 1, 1}));
  EXPECT_NE(load_error(w, "nomerges").find("tokenizer.ggml.merges"), std::string::npos);
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({"a b"}));
  // no default BOS, but Gemma 4 always adds one
  EXPECT_NE(load_error(w, "nobos").find("add_bos_token"), std::string::npos);
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(1));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::make_bool(false));
  // tokenizer.ggml.pre is ignored for this tokenizer model, as in llama.cpp
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("no-such-pre"));
  const std::string path = qlens::test::temp_dir() + "/gemma4.gguf";
  w.write(path);
  const auto file = gguf::File::open(path);
  const auto v = Vocab::from_gguf(*file);
  EXPECT_TRUE(v->add_bos());
  EXPECT_EQ(v->tokenize("ab", true), std::vector<Token>({1, 5}));
  // the space becomes U+2581, which is no token and has no byte tokens: dropped
  EXPECT_EQ(v->tokenize("ab b", false), std::vector<Token>({5, 4}));
  // a character that is no token: its <0xXX> byte tokens, those that exist
  EXPECT_EQ(v->tokenize("c", false), std::vector<Token>({6}));
  EXPECT_EQ(v->detokenize(std::vector<Token>{6, 3}), "ca");
  EXPECT_EQ(v->tokenize("\xC3\xA9", false), std::vector<Token>{});
  // a run of newlines that is a token is taken whole (there is no merge "\n \n")
  EXPECT_EQ(v->tokenize("a\n\nb", false), std::vector<Token>({3, 8, 4}));
  EXPECT_EQ(v->tokenize("\n\n\n", false), std::vector<Token>({7, 7, 7}));
}

TEST_F(HostileVocab, AddBosWithoutBos) {
  gguf::Writer w = base("gpt2");
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({"a b"}));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::make_bool(true));
  EXPECT_NE(load_error(w, "addbos").find("add_bos_token"), std::string::npos);  // default BOS 11 is out of range
}

TEST_F(HostileVocab, EmptyTokenTextDoesNotHang) {
  gguf::Writer w = base();
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({"<unk>", "<s>", "</s>", "", "b", "ab"}));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array({2, 3, 3, 4, 1, 1}));
  const std::string path = qlens::test::temp_dir() + "/emptytok.gguf";
  w.write(path);
  const auto file = gguf::File::open(path);
  const auto v = Vocab::from_gguf(*file);
  EXPECT_FALSE(v->tokenize("abab", false, true).empty());
}

// ---------------------------------------------------------------------------
// UTF-8 and Unicode tables

TEST(Unicode, DecodeValid) {
  EXPECT_EQ(uni::decode("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), std::vector<uint32_t>({'a', 0xE9, 0x20AC, 0x1F600}));
  for (uint32_t cp : {0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    EXPECT_EQ(uni::decode(uni::encode(cp)), std::vector<uint32_t>({cp})) << cp;
  }
}

TEST(Unicode, DecodeInvalid) {
  const uint32_t R = uni::kReplacement;
  // stray continuation byte, bytes that never start a sequence
  EXPECT_EQ(uni::decode("\x80"), std::vector<uint32_t>({R}));
  EXPECT_EQ(uni::decode("a\xBF" "b"), std::vector<uint32_t>({'a', R, 'b'}));
  EXPECT_EQ(uni::decode("\xF8\xFF"), std::vector<uint32_t>({R, R}));
  // truncated sequences: one replacement per bad byte, the rest is read again
  EXPECT_EQ(uni::decode("\xE2\x82"), std::vector<uint32_t>({R, R}));
  EXPECT_EQ(uni::decode("\xC3"), std::vector<uint32_t>({R}));
  EXPECT_EQ(uni::decode("\xE2\x82" "a"), std::vector<uint32_t>({R, R, 'a'}));
  EXPECT_EQ(uni::decode("\xF0\x9F\x98"), std::vector<uint32_t>({R, R, R}));
  // beyond U+10FFFF
  EXPECT_EQ(uni::decode("\xF4\x90\x80\x80"), std::vector<uint32_t>({R, R, R, R}));
  // overlong forms and surrogates decode as llama.cpp decodes them
  EXPECT_EQ(uni::decode("\xC0\x80"), std::vector<uint32_t>({0}));
  EXPECT_EQ(uni::decode("\xED\xA0\x80"), std::vector<uint32_t>({0xD800}));
  // never reads past the end, whatever the input
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 167 + 13) & 0xFF));
  for (size_t cut = 0; cut < 64; ++cut) EXPECT_NO_THROW(uni::decode(std::string_view(junk).substr(cut)));
}

TEST(Unicode, Categories) {
  EXPECT_EQ(uni::category('a'), uni::kLetter);
  EXPECT_EQ(uni::category(0xE9), uni::kLetter);
  EXPECT_EQ(uni::category(0x4E2D), uni::kLetter);  // 中
  EXPECT_EQ(uni::category('7'), uni::kNumber);
  EXPECT_EQ(uni::category(0xBD), uni::kNumber);  // ½
  EXPECT_EQ(uni::category(','), uni::kPunct);
  EXPECT_EQ(uni::category(0x3002), uni::kPunct);  // 。
  EXPECT_EQ(uni::category('+'), uni::kSymbol);
  EXPECT_EQ(uni::category(0x1F600), uni::kSymbol);
  EXPECT_EQ(uni::category(0x0301), uni::kMark);
  EXPECT_EQ(uni::category(0x3000), uni::kSeparator);
  EXPECT_EQ(uni::category(0x0378), uni::kOther);  // unassigned
  EXPECT_EQ(uni::category(0x110000), uni::kOther);
  EXPECT_TRUE(uni::is_whitespace(0x3000));
  EXPECT_TRUE(uni::is_whitespace(0x85));
  EXPECT_FALSE(uni::is_whitespace(0x1C));
  EXPECT_FALSE(uni::is_whitespace(0x200B));
  EXPECT_EQ(uni::to_lower('A'), uint32_t('a'));
  EXPECT_EQ(uni::to_lower(0x100), 0x101u);
  EXPECT_EQ(uni::to_lower(0x101), 0x101u);
  EXPECT_EQ(uni::to_lower(0x130), uint32_t('i'));
  EXPECT_EQ(uni::to_lower(0x410), 0x430u);  // Cyrillic А
  EXPECT_EQ(uni::nfd_base(0xE9), uint32_t('e'));
  EXPECT_EQ(uni::nfd_base(0xAC00), 0x1100u);  // 가 -> ᄀ
}

TEST(Unicode, ByteLevelMapping) {
  for (int b = 0; b < 256; ++b) {
    const std::vector<uint32_t> cps = uni::decode(uni::byte_to_utf8(static_cast<uint8_t>(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(uni::utf8_to_byte(cps[0]), std::optional<uint8_t>(static_cast<uint8_t>(b)));
  }
  EXPECT_EQ(uni::byte_to_utf8(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(uni::byte_to_utf8('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(uni::byte_to_utf8('a'), "a");
  EXPECT_FALSE(uni::utf8_to_byte(0x4E2D).has_value());
}

std::vector<std::string> split(const std::string& s, uni::PreTokenizer p) { return uni::pre_tokenize(s, p); }
using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  using P = uni::PreTokenizer;
  EXPECT_EQ(split("Hello world", P::Gpt2), V({"Hello", " world"}));
  EXPECT_EQ(split("I've 3 cats!!  ok  ", P::Gpt2), V({"I", "'ve", " 3", " cats", "!!", " ", " ok", "  "}));
  EXPECT_EQ(split("a\n\nb", P::Gpt2), V({"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("", P::Gpt2), V{});
}

TEST(PreTokenizer, Llama3) {
  using P = uni::PreTokenizer;
  EXPECT_EQ(split("Hello WORLD'S 12345", P::Llama3), V({"Hello", " WORLD", "'S", " ", "123", "45"}));
  EXPECT_EQ(split("x  \n\n y", P::Llama3), V({"x", "  \n\n", " y"}));
  EXPECT_EQ(split("(hi)...\n", P::Llama3), V({"(hi", ")...\n"}));
  EXPECT_EQ(split("12345", P::Qwen2), V({"1", "2", "3", "4", "5"}));
}

TEST(PreTokenizer, Newer) {
  using P = uni::PreTokenizer;
  // gpt-4o: words split where the case changes, contractions stay on, digits by three
  EXPECT_EQ(split("HelloWorld's 12345", P::Gpt4o), V({"Hello", "World's", " ", "123", "45"}));
  EXPECT_EQ(split("XMLHttp a/b//\n", P::Gpt4o), V({"XMLHttp", " a", "/b", "//\n"}));
  // kimi-k2 (as llama.cpp implements it): Han runs apart, other letters whatever their case
  EXPECT_EQ(split("HelloWorld\xE4\xB8\xAD\xE6\x96\x87" "abc's 1234", P::KimiK2),
            V({"HelloWorld", "\xE4\xB8\xAD\xE6\x96\x87", "abc's", " ", "123", "4"}));
  // deepseek-v3: digits by three, Han and kana runs, ASCII punctuation joins ASCII letters
  EXPECT_EQ(split("'Hello 12345 \xE4\xB8\xAD\xE3\x81\x82ok", P::DeepseekV3),
            V({"'Hello", " ", "123", "45", " ", "\xE4\xB8\xAD\xE3\x81\x82", "ok"}));
  // qwen35: combining marks stay in words (qwen2 cuts before them)
  EXPECT_EQ(split("e\xCC\x81x", P::Qwen35), V({"e\xCC\x81x"}));
  EXPECT_EQ(split("e\xCC\x81x", P::Qwen2), V({"e", "\xCC\x81x"}));
  // gemma4: newline runs and the rest
  EXPECT_EQ(split("a b\n\nc", P::NewlineRuns), V({"a b", "\n\n", "c"}));
  EXPECT_EQ(split("\r\n\r \n", P::NewlineRuns), V({"\r", "\n", "\r ", "\n"}));
}

TEST(PreTokenizer, Others) {
  using P = uni::PreTokenizer;
  EXPECT_EQ(split("HelloWorld ABC", P::Tekken), V({"Hello", "World", " ABC"}));
  EXPECT_EQ(split("a1234", P::Starcoder), V({"a", "1", "2", "3", "4"}));
  EXPECT_EQ(split("x = 12345;", P::Falcon), V({"x", " ", "=", " ", "123", "45", ";"}));
  EXPECT_EQ(split("Hello, world. Hi", P::Bloom), V({"Hello", ",", " world", ".", " Hi"}));
  EXPECT_EQ(split("ab\ncd  ", P::DeepseekLlm), V({"ab", "\n", "cd", "  "}));
  // every regex splits the pieces of the ones before it, so later ones cut up earlier matches
  EXPECT_EQ(split("<sentinel:12>IMGIMGABZ", P::Chameleon), V({"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ"}));
  // never loses or invents text, whatever the input
  std::string junk;
  for (int i = 0; i < 3000; ++i) junk.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  const std::string fixed = uni::encode(uni::decode(junk).data(), uni::decode(junk).size());
  for (P p : {P::Default, P::Gpt2, P::Llama3, P::Qwen2, P::DeepseekLlm, P::DeepseekCoder, P::Falcon, P::Starcoder,
              P::Bloom, P::Viking, P::Tekken, P::Chameleon, P::Qwen35, P::Gpt4o, P::DeepseekV3, P::KimiK2,
              P::NewlineRuns}) {
    std::string joined;
    for (const std::string& w : split(junk, p)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, fixed) << static_cast<int>(p);
  }
}

}  // namespace
