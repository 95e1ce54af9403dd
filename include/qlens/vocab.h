// Tokenizers built from GGUF metadata (tokenizer.ggml.*): SentencePiece-style
// ("llama"), byte-level BPE ("gpt2", with the pre-tokenizer that
// tokenizer.ggml.pre names), Gemma 4's SentencePiece-style BPE ("gemma4") and
// WordPiece ("bert"). Behaviour matches llama.cpp's, so token ids agree.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qlens/gguf.h"

namespace qlens {

using Token = int32_t;

enum class VocabKind { SentencePiece, BytePairEncoding, WordPiece };

class Vocab {
 public:
  // Throws Error naming the file when the tokenizer model is missing or unsupported.
  static std::unique_ptr<Vocab> from_gguf(const gguf::File& file);
  virtual ~Vocab() = default;

  // Text to tokens. add_special: BOS (and EOS where the model wants it) as the
  // model's metadata asks; parse_special: control-token text like "<s>" becomes
  // the token rather than being tokenized as plain text.
  virtual std::vector<Token> tokenize(std::string_view text, bool add_special,
                                      bool parse_special = false) const = 0;
  // The text of one token, as it appears in output (byte tokens become bytes,
  // SentencePiece's U+2581 becomes a space, byte-level BPE is decoded).
  virtual std::string token_to_piece(Token t) const = 0;
  std::string detokenize(std::span<const Token> tokens) const;

  virtual VocabKind kind() const = 0;
  virtual int32_t n_tokens() const = 0;
  virtual const std::string& token_text(Token t) const = 0;  // raw vocabulary entry
  virtual Token bos() const = 0;  // -1 when none
  virtual Token eos() const = 0;
  virtual bool add_bos() const = 0;  // tokenizer.ggml.add_bos_token (or model default)
  virtual bool is_control(Token t) const = 0;
};

}  // namespace qlens
