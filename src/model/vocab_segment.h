// The merge loops of the two subword tokenizers, shared between vocab.cpp
// (which owns the vocabulary) and the files that implement them.
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace qlens::detail {

// SentencePiece: repeatedly merges the adjacent pair whose concatenation has
// the best score (nullopt: not in the vocabulary). Defined in vocab_spm.cpp.
std::vector<std::string_view> spm_segment(std::string_view text,
                                          const std::function<std::optional<float>(std::string_view)>& score_of);

// Byte-level BPE: repeatedly merges the adjacent pair of lowest merge rank
// (negative: no merge). Defined in vocab_bpe.cpp.
std::vector<std::string_view> bpe_segment(std::string_view word,
                                          const std::function<int(std::string_view, std::string_view)>& rank_of);

}  // namespace qlens::detail
