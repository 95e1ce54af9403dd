// Byte-pair merging by rank over one pre-token (already byte-encoded): start
// from single characters and repeatedly merge the adjacent pair with the lowest
// merge rank (leftmost first on ties), as llama.cpp's BPE tokenizer does.
#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "model/unicode.h"
#include "model/vocab_segment.h"

namespace qlens::detail {

std::vector<std::string_view> bpe_segment(std::string_view word,
                                          const std::function<int(std::string_view, std::string_view)>& rank_of) {
  struct Symbol {
    int prev;
    int next;
    size_t off;
    size_t n;
  };
  struct Bigram {
    int left;
    int right;
    int rank;
    size_t left_n;
    size_t right_n;
  };
  struct Later {  // priority: lowest rank first, then the leftmost pair
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(unicode::utf8_len(static_cast<uint8_t>(word[off])), word.size() - off);
    const int index = static_cast<int>(sym.size());
    sym.push_back({index - 1, off + n == word.size() ? -1 : index + 1, off, n});
    off += n;
  }
  if (sym.empty()) return {};

  std::priority_queue<Bigram, std::vector<Bigram>, Later> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int rank = rank_of(word.substr(sym[left].off, sym[left].n), word.substr(sym[right].off, sym[right].n));
    if (rank < 0) return;
    queue.push({left, right, rank, sym[left].n, sym[right].n});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // stale: one side was merged away or grew since this pair was queued
    if (l.n != b.left_n || r.n != b.right_n || l.next != b.right) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  std::vector<std::string_view> out;
  for (int i = 0; i != -1; i = sym[i].next) out.push_back(word.substr(sym[i].off, sym[i].n));
  return out;
}

}  // namespace qlens::detail
