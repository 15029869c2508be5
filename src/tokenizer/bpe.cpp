// Byte-pair encoding: split a word into chars (or byte-fallback tokens, or
// unk), then apply merges lowest rank first, as HF's Word::merge_all does
// (a min-heap of candidate pairs ordered by (rank, position)).
//
// Merged words are cached per thread (like HF's cache) keyed by the word; the
// cache belongs to one model at a time and is dropped when another model runs
// on the thread, so it never returns another model's ids.
#include <atomic>
#include <queue>

#include "tokenizer/error.h"
#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

std::atomic<uint64_t> next_cache_key{1};
constexpr size_t k_cache_capacity = 10000;
constexpr size_t k_cache_max_word_bytes = 256;

struct WordCache {
    uint64_t owner = 0;
    FlatStringMap<Bpe::Word> map;
};
thread_local WordCache tls_cache;

struct Symbol {
    uint32_t c;
    int32_t prev;
    int32_t next;
    uint32_t len;
};

struct Candidate {
    uint32_t rank;
    uint32_t pos;
    uint32_t new_id;
    // std::priority_queue is a max-heap: "less" means larger (rank, pos).
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), opt_(std::move(options)), cache_key_(next_cache_key.fetch_add(1)) {
    for (const auto& [tok, id] : vocab_) {
        vocab_r_[id] = tok;
        lookup_.insert(tok, id);
    }
    const size_t prefix_len = opt_.continuing_subword_prefix ? opt_.continuing_subword_prefix->size() : 0;
    merges_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const auto& [a, b] = merges[i];
        const auto ia = vocab_.find(a);
        if (ia == vocab_.end())
            throw TokenizerError("merges/" + std::to_string(i) + ": token '" + a + "' is not in the vocabulary");
        const auto ib = vocab_.find(b);
        if (ib == vocab_.end())
            throw TokenizerError("merges/" + std::to_string(i) + ": token '" + b + "' is not in the vocabulary");
        if (b.size() < prefix_len)
            throw TokenizerError("merges/" + std::to_string(i) + ": token '" + b +
                                 "' is shorter than the continuing_subword_prefix");
        const std::string merged = a + b.substr(prefix_len);
        const auto im = vocab_.find(merged);
        if (im == vocab_.end())
            throw TokenizerError("merges/" + std::to_string(i) + ": merged token '" + merged +
                                 "' is not in the vocabulary");
        const uint64_t key = (uint64_t(ia->second) << 32) | ib->second;
        merges_[key] = {static_cast<uint32_t>(i), im->second};
    }
    if (opt_.unk_token && !vocab_.count(*opt_.unk_token)) {
        // Only an error when an unknown char is met (as in the reference);
        // checked lazily in merge_word.
    }
}

void Bpe::merge_word(std::string_view w, Word& word) const {
    word.clear();
    std::optional<std::pair<uint32_t, uint32_t>> unk;  // (id, byte length)
    auto unk_id = [&]() -> uint32_t {
        const auto it = vocab_.find(*opt_.unk_token);
        if (it == vocab_.end())
            throw TokenizerError("BPE: unk_token '" + *opt_.unk_token + "' is not in the vocabulary");
        return it->second;
    };
    std::string s;
    for (size_t i = 0; i < w.size();) {
        const size_t len = utf8_len_from_lead(static_cast<unsigned char>(w[i]));
        const bool is_first = i == 0;
        const bool is_last = i + len >= w.size();
        std::string_view piece = w.substr(i, len);
        i += len;
        s.clear();
        if (!is_first && opt_.continuing_subword_prefix) s += *opt_.continuing_subword_prefix;
        s += piece;
        if (is_last && opt_.end_of_word_suffix) s += *opt_.end_of_word_suffix;
        if (const uint32_t* id = lookup_.find(s)) {
            if (unk) {
                word.push_back(*unk);
                unk.reset();
            }
            word.emplace_back(*id, static_cast<uint32_t>(len));
            continue;
        }
        if (opt_.byte_fallback) {
            std::vector<uint32_t> ids;
            bool all = true;
            for (unsigned char b : s) {
                char code[8];
                static const char* hex = "0123456789ABCDEF";
                code[0] = '<';
                code[1] = '0';
                code[2] = 'x';
                code[3] = hex[b >> 4];
                code[4] = hex[b & 15];
                code[5] = '>';
                const uint32_t* ib = lookup_.find(std::string_view(code, 6));
                if (!ib) {
                    all = false;
                    break;
                }
                ids.push_back(*ib);
            }
            if (all) {
                for (uint32_t id : ids) word.emplace_back(id, 1);
                continue;
            }
        }
        if (opt_.unk_token) {
            if (unk && opt_.fuse_unk) {
                unk->second += static_cast<uint32_t>(len);
            } else {
                if (unk) word.push_back(*unk);
                unk = std::make_pair(unk_id(), static_cast<uint32_t>(len));
            }
        }
    }
    if (unk) word.push_back(*unk);
    merge_all(word);
}

void Bpe::merge_all(Word& word) const {
    if (word.size() < 2) return;
    std::vector<Symbol> sym(word.size());
    for (size_t i = 0; i < word.size(); ++i)
        sym[i] = {word[i].first, static_cast<int32_t>(i) - 1,
                  i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, word[i].second};
    auto find = [&](uint32_t a, uint32_t b) -> const std::pair<uint32_t, uint32_t>* {
        const auto it = merges_.find((uint64_t(a) << 32) | b);
        return it == merges_.end() ? nullptr : &it->second;
    };
    std::vector<Candidate> heap_storage;
    heap_storage.reserve(word.size() * 2);
    std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(heap_storage));
    for (size_t i = 0; i + 1 < sym.size(); ++i)
        if (const auto* m = find(sym[i].c, sym[i + 1].c))
            queue.push({m->first, static_cast<uint32_t>(i), m->second});
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& cur = sym[top.pos];
        if (cur.len == 0 || cur.next == -1) continue;
        const auto next_pos = static_cast<size_t>(cur.next);
        const Symbol right = sym[next_pos];
        const auto* m = find(cur.c, right.c);
        if (!m || m->second != top.new_id) continue;  // stale entry
        cur.c = top.new_id;
        cur.len += right.len;
        cur.next = right.next;
        sym[next_pos].len = 0;
        if (right.next > -1 && static_cast<size_t>(right.next) < sym.size())
            sym[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
        if (cur.prev >= 0) {
            const Symbol& p = sym[static_cast<size_t>(cur.prev)];
            if (const auto* pm = find(p.c, cur.c)) queue.push({pm->first, static_cast<uint32_t>(cur.prev), pm->second});
        }
        if (cur.next >= 0 && static_cast<size_t>(cur.next) < sym.size()) {
            const Symbol& n = sym[static_cast<size_t>(cur.next)];
            if (const auto* nm = find(cur.c, n.c)) queue.push({nm->first, top.pos, nm->second});
        }
    }
    word.clear();
    for (const Symbol& s : sym)
        if (s.len != 0) word.emplace_back(s.c, s.len);
}

void Bpe::tokenize(std::string_view sequence, std::vector<Token>& out) const {
    if (sequence.empty()) return;
    if (opt_.ignore_merges) {
        const auto it = vocab_.find(sequence);
        if (it != vocab_.end()) {
            out.push_back(Token{it->second, std::string(sequence), {0, sequence.size()}});
            return;
        }
    }
    WordCache& cache = tls_cache;
    if (cache.owner != cache_key_) {
        cache.map.clear();
        cache.owner = cache_key_;
    }
    const Word* word = cache.map.find(sequence);
    Word local;
    if (!word) {
        merge_word(sequence, local);
        if (sequence.size() < k_cache_max_word_bytes && cache.map.size() < k_cache_capacity) {
            word = &cache.map.insert(sequence, std::move(local));
        } else {
            word = &local;
        }
    }
    size_t pos = 0;
    for (const auto& [id, len] : *word) {
        out.push_back(Token{id, vocab_r_.at(id), {pos, pos + len}});
        pos += len;
    }
}

std::optional<uint32_t> Bpe::token_to_id(std::string_view token) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* Bpe::id_to_token(uint32_t id) const {
    const auto it = vocab_r_.find(id);
    return it == vocab_r_.end() ? nullptr : &it->second;
}

}  // namespace loom::tokenizer
