// SentencePiece-style segmentation as llama.cpp does it for "llama" vocabularies:
// start from single UTF-8 characters and keep merging the adjacent pair whose
// concatenation is a vocabulary piece with the highest score (leftmost first
// on ties) until no pair is a piece.
#include <algorithm>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "model/unicode.h"
#include "model/vocab_segment.h"

namespace qlens::detail {

std::vector<std::string_view> spm_segment(std::string_view text,
                                          const std::function<std::optional<float>(std::string_view)>& score_of) {
  struct Symbol {
    int prev;
    int next;
    size_t off;
    size_t n;
  };
  struct Bigram {
    int left;
    int right;
    float score;
    size_t size;
  };
  struct Lower {  // priority: higher score first, then the leftmost pair
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int index = static_cast<int>(sym.size());
    sym.push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }
  if (sym.empty()) return {};

  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = sym[left].n + sym[right].n;
    const std::optional<float> score = score_of(text.substr(sym[left].off, size));
    if (!score) return;
    queue.push({left, right, *score, size});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  std::vector<std::string_view> out;
  for (int i = 0; i != -1; i = sym[i].next) out.push_back(text.substr(sym[i].off, sym[i].n));
  return out;
}

}  // namespace qlens::detail
