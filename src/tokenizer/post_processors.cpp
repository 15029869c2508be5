// Post-processors (HF tokenizers processors/*.rs): add special tokens, set
// type ids and sequence ranges, and for byte-level models trim offsets.
#include <cstdint>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

Encoding special_encoding(const std::vector<uint32_t>& ids, const std::vector<std::string>& tokens, uint32_t type_id) {
    Encoding e;
    e.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) e.push_back(ids[i], tokens[i], {}, {}, -1, type_id, 1, 1);
    return e;
}

// [cls?] + e + [sep], as Bert/Roberta processing build each side.
Encoding wrap(const Encoding& e, const std::string* cls_tok, uint32_t cls_id, const std::string& sep_tok,
              uint32_t sep_id, uint32_t type_first, uint32_t type_last, bool retype, uint32_t retype_value,
              size_t seq) {
    Encoding out;
    out.reserve(e.size() + 2);
    if (cls_tok) out.push_back(cls_id, *cls_tok, {}, {}, -1, type_first, 1, 1);
    for (size_t i = 0; i < e.size(); ++i)
        out.push_back(e.ids[i], e.tokens[i], e.offsets[i], e.offsets_utf8[i], e.word_ids[i],
                      retype ? retype_value : e.type_ids[i], 0, 1);
    out.push_back(sep_id, sep_tok, {}, {}, -1, type_last, 1, 1);
    const size_t first = cls_tok ? 1 : 0;
    out.sequence_ranges.push_back({seq, first, out.size() - 1});
    return out;
}

bool is_space_token_char(char32_t c) { return c == byte_level_chars()[' '] || is_whitespace(c); }

}  // namespace

void byte_level_process_offsets(Encoding& e, bool add_prefix_space) {
    for (size_t i = 0; i < e.size(); ++i) {
        const std::string& token = e.tokens[i];
        std::vector<char32_t> chars;
        for (size_t b = 0; b < token.size();) {
            size_t len;
            chars.push_back(utf8_decode(token, b, len));
            b += len;
        }
        size_t leading = 0, trailing = 0;
        while (leading < chars.size() && is_space_token_char(chars[leading])) ++leading;
        while (trailing < chars.size() && is_space_token_char(chars[chars.size() - 1 - trailing])) ++trailing;
        if (leading == 0 && trailing == 0) continue;
        for (Offsets* o : {&e.offsets[i], &e.offsets_utf8[i]}) {
            size_t lead = leading;
            if (lead > 0) {
                const bool is_first = i == 0 || o->start == 0;
                if (is_first && add_prefix_space && lead == 1) lead = 0;
                o->start = std::min(o->start + lead, o->end);
            }
            if (trailing > 0 && o->end >= trailing) o->end = std::max(o->end - trailing, o->start);
        }
    }
}

void BertProcessing::process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const {
    if (!add_special_tokens) return;
    for (size_t i = 0; i < encodings.size(); ++i) {
        Encoding& e = encodings[i];
        const bool first = i == 0;
        Encoding out = wrap(e, first ? &cls_token : nullptr, cls_id, sep_token, sep_id, 0, first ? 0 : 1, false, 0, i);
        for (const Encoding& o : e.overflowing)
            out.overflowing.push_back(
                wrap(o, first ? &cls_token : nullptr, cls_id, sep_token, sep_id, 0, first ? 0 : 1, false, 0, i));
        e = std::move(out);
    }
}

void RobertaProcessing::process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const {
    if (trim_offsets) {
        for (Encoding& e : encodings) {
            byte_level_process_offsets(e, add_prefix_space);
            for (Encoding& o : e.overflowing) byte_level_process_offsets(o, add_prefix_space);
        }
    }
    for (Encoding& e : encodings) e.set_type_ids(0);
    if (!add_special_tokens) return;
    for (size_t i = 0; i < encodings.size(); ++i) {
        Encoding& e = encodings[i];
        // Both sides get a leading token: <s> for the first, </s> for the pair.
        const std::string& lead_tok = i == 0 ? cls_token : sep_token;
        const uint32_t lead_id = i == 0 ? cls_id : sep_id;
        Encoding out = wrap(e, &lead_tok, lead_id, sep_token, sep_id, 0, 0, true, 0, i);
        for (const Encoding& o : e.overflowing) out.overflowing.push_back(wrap(o, &lead_tok, lead_id, sep_token, sep_id, 0, 0, true, 0, i));
        e = std::move(out);
    }
}

void ByteLevelProcessing::process_encodings(std::vector<Encoding>& encodings, bool) const {
    if (trim_offsets) {
        for (Encoding& e : encodings) {
            byte_level_process_offsets(e, add_prefix_space);
            for (Encoding& o : e.overflowing) byte_level_process_offsets(o, add_prefix_space);
        }
    }
    for (size_t i = 0; i < encodings.size(); ++i) encodings[i].set_sequence_id(i);
}

const TemplateSpecialToken* TemplateProcessing::find_special(const std::string& id) const {
    for (const auto& t : special_tokens)
        if (t.id == id) return &t;
    return nullptr;
}

void TemplateProcessing::process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const {
    const std::vector<TemplatePiece>& tmpl = encodings.size() == 2 ? pair : single;
    std::vector<Encoding> out;
    out.reserve(tmpl.size());
    // Each sequence is moved at its last use in the template, copied before.
    size_t last_use[2] = {SIZE_MAX, SIZE_MAX};
    for (size_t k = 0; k < tmpl.size(); ++k)
        if (tmpl[k].is_sequence && tmpl[k].sequence < 2) last_use[tmpl[k].sequence] = k;
    for (size_t k = 0; k < tmpl.size(); ++k) {
        const TemplatePiece& p = tmpl[k];
        if (p.is_sequence) {
            if (p.sequence >= encodings.size()) continue;
            Encoding& e = encodings[p.sequence];
            e.set_type_ids(p.type_id);
            e.set_sequence_id(p.sequence);
            if (last_use[p.sequence] == k) {
                out.push_back(std::move(e));
            } else {
                out.push_back(e);
            }
        } else if (add_special_tokens) {
            const TemplateSpecialToken* t = find_special(p.special_id);
            if (t) out.push_back(special_encoding(t->ids, t->tokens, p.type_id));
        }
    }
    encodings = std::move(out);
}

}  // namespace loom::tokenizer
