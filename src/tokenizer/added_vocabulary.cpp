// AddedVocabulary: registering added tokens and splitting them out of inputs.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/components.h"
#include "tokenizer/error.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

// Rust regex \w$ on the text before a match.
bool ends_with_word(std::string_view s) {
    if (s.empty()) return false;
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t len;
    return is_word_char(utf8_decode(s, i, len));
}
// Rust regex ^\w on the text after a match.
bool starts_with_word(std::string_view s) {
    if (s.empty()) return false;
    size_t len;
    return is_word_char(utf8_decode(s, 0, len));
}
// Start of the trailing whitespace run of s (s.size() if none).
size_t space_leftmost_at_end(std::string_view s) {
    size_t i = s.size();
    while (i > 0) {
        size_t b = i - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        size_t len;
        if (!is_whitespace(utf8_decode(s, b, len))) break;
        i = b;
    }
    return i;
}
// End of the leading whitespace run of s.
size_t space_rightmost_at_start(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t len;
        if (!is_whitespace(utf8_decode(s, i, len))) break;
        i += len;
    }
    return i;
}

}  // namespace

void AddedVocabulary::Matcher::build(const std::vector<std::string>& patterns, std::vector<uint32_t> token_ids) {
    nodes.assign(1, Node{});
    ids = std::move(token_ids);
    std::fill(std::begin(first_byte), std::end(first_byte), false);
    for (size_t p = 0; p < patterns.size(); ++p) {
        const std::string& pat = patterns[p];
        if (pat.empty()) continue;
        first_byte[static_cast<unsigned char>(pat[0])] = true;
        uint32_t node = 0;
        for (unsigned char b : pat) {
            uint32_t child = 0;
            for (const auto& [cb, ci] : nodes[node].children)
                if (cb == b) child = ci;
            if (child == 0) {
                child = static_cast<uint32_t>(nodes.size());
                nodes[node].children.emplace_back(b, child);
                nodes.emplace_back();
            }
            node = child;
        }
        if (nodes[node].pattern < 0) nodes[node].pattern = static_cast<int64_t>(p);  // first pattern wins
    }
}

std::vector<AddedVocabulary::Matcher::Hit> AddedVocabulary::Matcher::find_all(std::string_view s) const {
    std::vector<Hit> out;
    if (nodes.size() <= 1) return out;
    size_t i = 0;
    while (i < s.size()) {
        if (!first_byte[static_cast<unsigned char>(s[i])]) {
            ++i;
            continue;
        }
        uint32_t node = 0;
        int64_t best = -1;
        size_t best_end = 0;
        for (size_t k = i; k < s.size(); ++k) {
            const auto b = static_cast<unsigned char>(s[k]);
            uint32_t child = 0;
            for (const auto& [cb, ci] : nodes[node].children)
                if (cb == b) {
                    child = ci;
                    break;
                }
            if (child == 0) break;
            node = child;
            if (nodes[node].pattern >= 0) {
                best = nodes[node].pattern;
                best_end = k + 1;
            }
        }
        if (best >= 0) {
            out.push_back({ids[static_cast<size_t>(best)], i, best_end});
            i = best_end;
        } else {
            ++i;
        }
    }
    return out;
}

std::optional<uint32_t> AddedVocabulary::token_to_id(std::string_view token, const Model& model) const {
    const auto it = by_content_.find(std::string(token));
    if (it != by_content_.end()) return it->second;
    return model.token_to_id(token);
}

const AddedToken* AddedVocabulary::find(uint32_t id) const {
    const auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &it->second;
}

void AddedVocabulary::add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                                 const Normalizer* normalizer) {
    for (const AddedToken& t : tokens) {
        if (t.special && !t.content.empty() && !special_set_.count(t.content)) {
            special_tokens_.push_back(t);
            special_set_.insert(t.content);
        }
    }
    const auto vocab_size = static_cast<uint32_t>(model.vocab_size());
    uint32_t next_id = vocab_size;
    if (!by_id_.empty()) {
        uint32_t max_id = 0;
        for (const auto& [id, tok] : by_id_) max_id = std::max(max_id, id);
        next_id = (max_id >= vocab_size || vocab_size == 0) ? max_id + 1 : vocab_size;
    }
    auto same = [](const AddedToken& a, const AddedToken& b) {
        return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
               a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
    };
    std::vector<AddedToken> existing;
    for (const auto& [id, tok] : by_id_) existing.push_back(tok);
    for (const AddedToken& t : tokens) {
        bool seen = false;
        for (const auto& e : existing) seen |= same(e, t);
        if (t.content.empty() || seen) continue;
        uint32_t id;
        if (auto known = token_to_id(t.content, model)) {
            id = *known;
        } else {
            id = next_id++;
        }
        by_content_[t.content] = id;
        by_id_[id] = t;
        if (!special_set_.count(t.content)) added_tokens_.push_back(t);
        existing.push_back(t);
    }
    refresh(model, normalizer);
}

void AddedVocabulary::refresh(const Model& model, const Normalizer* normalizer) {
    std::vector<std::string> raw, norm;
    std::vector<uint32_t> raw_ids, norm_ids;
    auto add = [&](const AddedToken& t) {
        const auto id = token_to_id(t.content, model);
        if (!id) throw TokenizerError("internal error: added token '" + t.content + "' has no id");
        if (t.normalized) {
            NormalizedString n(t.content);
            if (normalizer) normalizer->normalize(n);
            norm.push_back(n.get());
            norm_ids.push_back(*id);
        } else {
            raw.push_back(t.content);
            raw_ids.push_back(*id);
        }
    };
    for (const AddedToken& t : special_tokens_) add(t);
    for (const AddedToken& t : added_tokens_) add(t);
    raw_matcher_.build(raw, std::move(raw_ids));
    normalized_matcher_.build(norm, std::move(norm_ids));
}

void AddedVocabulary::split_with_indices(NormalizedString&& s, const Matcher& m, std::vector<Split>& out) const {
    const std::string& text = s.get();
    struct Piece {
        int64_t id;
        size_t start, end;
    };
    std::vector<Piece> pieces;
    if (text.empty()) {
        pieces.push_back({-1, 0, 0});
    } else {
        size_t start_offset = 0;
        for (const auto& hit : m.find_all(text)) {
            size_t start = hit.start, stop = hit.end;
            const AddedToken& tok = by_id_.at(hit.id);
            if (tok.single_word) {
                const bool start_space = start == 0 || !ends_with_word(std::string_view(text).substr(0, start));
                const bool stop_space = stop == text.size() || !starts_with_word(std::string_view(text).substr(stop));
                if (!start_space || !stop_space) continue;
            }
            if (tok.lstrip) start = std::max(space_leftmost_at_end(std::string_view(text).substr(0, start)), start_offset);
            if (tok.rstrip) stop += space_rightmost_at_start(std::string_view(text).substr(stop));
            if (start_offset < start) pieces.push_back({-1, start_offset, start});
            pieces.push_back({hit.id, start, stop});
            start_offset = stop;
        }
        if (start_offset != text.size()) pieces.push_back({-1, start_offset, text.size()});
    }
    const auto& al = s.alignments();
    const bool identity_slice =
        text.empty() || (al.front().start == 0 && al.back().end == s.original().size());
    if (identity_slice && pieces.size() == 1 && pieces[0].id < 0 && pieces[0].start == 0 &&
        pieces[0].end == text.size()) {
        out.push_back({std::move(s), std::nullopt});  // nothing found: keep the piece as is
        return;
    }
    for (const Piece& p : pieces) {
        auto slice = s.slice(p.start, p.end);
        if (!slice) throw TokenizerError("internal error: added vocabulary bad split");
        if (p.id >= 0) {
            std::string value = slice->get();
            const size_t len = value.size();
            std::vector<Token> toks;
            toks.push_back(Token{static_cast<uint32_t>(p.id), std::move(value), {0, len}});
            out.push_back({std::move(*slice), std::move(toks)});
        } else {
            out.push_back({std::move(*slice), std::nullopt});
        }
    }
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer,
                                                          std::string_view sequence) const {
    PreTokenizedString pre{NormalizedString(sequence)};
    pre.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        split_with_indices(std::move(n), raw_matcher_, out);
    });
    pre.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        if (normalizer) normalizer->normalize(n);
        split_with_indices(std::move(n), normalized_matcher_, out);
    });
    return pre;
}

}  // namespace loom::tokenizer
