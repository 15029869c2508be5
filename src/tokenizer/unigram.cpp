// Unigram: Viterbi over all vocabulary pieces that match at each position
// (HF's encode_optimized, after sentencepiece). A char no piece covers gets
// unk with score min_score - 10; consecutive unknown chars are fused into one
// token whose string is the original text and whose id is unk_id.
#include <cmath>
#include <limits>

#include "tokenizer/error.h"
#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {
constexpr double k_unk_penalty = 10.0;
}

Unigram::Unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<size_t> unk_id, bool byte_fallback)
    : vocab_(std::move(vocab)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
    if (unk_id_) {
        if (vocab_.empty()) throw TokenizerError("Unigram: the vocabulary is empty but unk_id is set");
        if (*unk_id_ >= vocab_.size())
            throw TokenizerError("unk_id: " + std::to_string(*unk_id_) + " is out of range for a vocabulary of " +
                                 std::to_string(vocab_.size()) + " pieces");
    }
    min_score_ = std::numeric_limits<double>::infinity();
    trie_.emplace_back();
    for (size_t id = 0; id < vocab_.size(); ++id) {
        const auto& [piece, score] = vocab_[id];
        token_to_id_[piece] = static_cast<uint32_t>(id);
        uint32_t node = 0;
        for (unsigned char b : piece) {
            uint32_t child = 0;
            for (const auto& [cb, ci] : trie_[node].children)
                if (cb == b) child = ci;
            if (child == 0) {
                child = static_cast<uint32_t>(trie_.size());
                trie_[node].children.emplace_back(b, child);
                trie_.emplace_back();
            }
            node = child;
        }
        if (!piece.empty()) trie_[node].id = static_cast<int64_t>(id);  // the last duplicate wins
        if (score < min_score_) min_score_ = score;
    }
}

void Unigram::encode(std::string_view s, std::vector<std::string_view>& pieces) const {
    struct Best {
        size_t id = 0;
        double score = 0;
        bool set = false;
        size_t starts_at = 0;
    };
    const size_t size = s.size();
    const double unk_score = min_score_ - k_unk_penalty;
    std::vector<Best> best(size + 1);
    size_t starts_at = 0;
    while (starts_at < size) {
        const double base = best[starts_at].score;
        bool has_single_node = false;
        const size_t mblen = utf8_len_from_lead(static_cast<unsigned char>(s[starts_at]));
        uint32_t node = 0;
        for (size_t k = starts_at; k < size; ++k) {
            const auto b = static_cast<unsigned char>(s[k]);
            uint32_t child = 0;
            for (const auto& [cb, ci] : trie_[node].children)
                if (cb == b) {
                    child = ci;
                    break;
                }
            if (child == 0) break;
            node = child;
            const int64_t id = trie_[node].id;
            if (id < 0) continue;
            const size_t key_pos = k + 1;
            // A piece ending inside a multi-byte char cannot be a token boundary.
            if (key_pos < size && (static_cast<unsigned char>(s[key_pos]) & 0xC0) == 0x80) continue;
            Best& target = best[key_pos];
            const double cand = vocab_[static_cast<size_t>(id)].second + base;
            if (!target.set || cand > target.score) {
                target = {static_cast<size_t>(id), cand, true, starts_at};
            }
            if (!has_single_node && key_pos - starts_at == mblen) has_single_node = true;
        }
        if (!has_single_node) {
            if (!unk_id_) throw TokenizerError("Unigram: met an unknown character but unk_id is not set");
            Best& target = best[std::min(starts_at + mblen, size)];
            const double cand = unk_score + base;
            if (!target.set || cand > target.score) target = {*unk_id_, cand, true, starts_at};
        }
        starts_at += mblen;
    }
    // Walk back; fuse runs of unk into one piece.
    std::vector<std::string_view> rev;
    size_t ends_at = size;
    size_t unk_end = 0;
    bool in_unk = false;
    while (ends_at > 0) {
        const Best& node = best[ends_at];
        const size_t st = node.starts_at;
        if (unk_id_ && node.id == *unk_id_) {
            if (!in_unk) {
                unk_end = ends_at;
                in_unk = true;
            }
        } else {
            if (in_unk) {
                rev.push_back(s.substr(ends_at, unk_end - ends_at));
                in_unk = false;
            }
            rev.push_back(s.substr(st, ends_at - st));
        }
        ends_at = st;
    }
    if (in_unk) rev.push_back(s.substr(0, unk_end));
    pieces.assign(rev.rbegin(), rev.rend());
}

void Unigram::tokenize(std::string_view word, std::vector<Token>& out) const {
    if (word.empty()) return;
    std::vector<std::string_view> pieces;
    encode(word, pieces);
    size_t offset = 0;
    for (std::string_view p : pieces) {
        const size_t len = p.size();
        const auto it = token_to_id_.find(p);
        if (it != token_to_id_.end()) {
            out.push_back(Token{it->second, std::string(p), {offset, offset + len}});
        } else {
            if (byte_fallback_) {
                std::vector<Token> bytes;
                bool all = true;
                static const char* hex = "0123456789ABCDEF";
                for (unsigned char b : p) {
                    const std::string code = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
                    const auto ib = token_to_id_.find(code);
                    if (ib == token_to_id_.end()) {
                        all = false;
                        break;
                    }
                    bytes.push_back(Token{ib->second, code, {offset, offset + len}});
                }
                if (all) {
                    for (auto& t : bytes) out.push_back(std::move(t));
                    offset += len;
                    continue;
                }
            }
            if (!unk_id_) throw TokenizerError("Unigram: met an unknown piece but unk_id is not set");
            out.push_back(Token{static_cast<uint32_t>(*unk_id_), std::string(p), {offset, offset + len}});
        }
        offset += len;
    }
}

std::optional<uint32_t> Unigram::token_to_id(std::string_view token) const {
    const auto it = token_to_id_.find(token);
    if (it == token_to_id_.end()) return std::nullopt;
    return it->second;
}

const std::string* Unigram::id_to_token(uint32_t id) const {
    return id < vocab_.size() ? &vocab_[id].first : nullptr;
}

}  // namespace loom::tokenizer
