// Tokenizer: the encode/decode pipeline (HF TokenizerImpl::encode,
// post_process, encode_batch, decode) over the loaded components.
#include "tokenizer/tokenizer.h"

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads() { return 1; }
#endif

#include <algorithm>
#include <exception>
#include <limits>

#include "tokenizer/components.h"
#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer::Tokenizer(Parts&& parts)
    : normalizer_(std::move(parts.normalizer)),
      pre_tokenizer_(std::move(parts.pre_tokenizer)),
      model_(std::move(parts.model)),
      post_processor_(std::move(parts.post_processor)),
      decoder_(std::move(parts.decoder)),
      truncation_(std::move(parts.truncation)),
      padding_(std::move(parts.padding)) {
    if (!model_) throw TokenizerError("tokenizer has no model");
    added_.add_tokens(parts.added_tokens, *model_, normalizer_.get());
}

Encoding Tokenizer::encode_single(std::string_view text, uint32_t type_id) const {
    if (text.size() >= std::numeric_limits<uint32_t>::max())
        throw TokenizerError("input of " + std::to_string(text.size()) + " bytes is too long (limit 4 GiB)");
    std::string repaired;
    if (!utf8_is_valid(text)) {
        repaired = utf8_lossy(text);
        text = repaired;
    }
    PreTokenizedString pre = added_.extract_and_normalize(normalizer_.get(), text);
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pre);
    for (Split& s : pre.splits()) {
        if (s.tokens) continue;
        std::vector<Token> toks;
        model_->tokenize(s.normalized.get(), toks);
        s.tokens = std::move(toks);
    }
    return pre.into_encoding(-1, type_id);
}

static void truncate_encodings(Encoding& enc, std::optional<Encoding>& pair, const TruncationParams& p) {
    if (p.max_length == 0) {
        enc.truncate(0, p.stride, p.direction);
        if (pair) pair->truncate(0, p.stride, p.direction);
        return;
    }
    const size_t total = enc.size() + (pair ? pair->size() : 0);
    if (total <= p.max_length) return;
    const size_t to_remove = total - p.max_length;
    switch (p.strategy) {
        case TruncationStrategy::LongestFirst: {
            if (!pair) {
                enc.truncate(total - to_remove, p.stride, p.direction);
                break;
            }
            size_t n1 = enc.size(), n2 = pair->size();
            const bool swap = n1 > n2;
            if (swap) std::swap(n1, n2);
            if (n1 > p.max_length) {
                n2 = n1;
            } else {
                n2 = std::max(n1, p.max_length - n1);
            }
            if (n1 + n2 > p.max_length) {
                n1 = p.max_length / 2;
                n2 = n1 + p.max_length % 2;
            }
            if (swap) std::swap(n1, n2);
            enc.truncate(n1, p.stride, p.direction);
            pair->truncate(n2, p.stride, p.direction);
            break;
        }
        case TruncationStrategy::OnlyFirst:
        case TruncationStrategy::OnlySecond: {
            Encoding* target = p.strategy == TruncationStrategy::OnlyFirst ? &enc : (pair ? &*pair : nullptr);
            if (!target) throw TokenizerError("truncation OnlySecond: no second sequence was given");
            if (target->size() <= to_remove)
                throw TokenizerError("truncation: the sequence to truncate is too short to respect max_length " +
                                     std::to_string(p.max_length));
            target->truncate(target->size() - to_remove, p.stride, p.direction);
            break;
        }
    }
}

static size_t padded_length(size_t length, const PaddingParams& p) {
    if (p.pad_to_multiple_of && *p.pad_to_multiple_of > 0 && length % *p.pad_to_multiple_of > 0)
        length += *p.pad_to_multiple_of - length % *p.pad_to_multiple_of;
    return length;
}

Encoding Tokenizer::post_process(Encoding encoding, std::optional<Encoding> pair, bool add_special_tokens,
                                 const std::optional<TruncationParams>& truncation,
                                 const std::optional<PaddingParams>& padding) const {
    if (truncation) {
        TruncationParams t = *truncation;
        const size_t n_added = post_processor_ ? post_processor_->added_tokens(pair.has_value()) : 0;
        if (add_special_tokens && n_added > 0) {
            if (t.max_length < n_added)
                throw TokenizerError("truncation: max_length " + std::to_string(t.max_length) +
                                     " is smaller than the " + std::to_string(n_added) +
                                     " special tokens the post-processor adds");
            t.max_length -= n_added;
        }
        truncate_encodings(encoding, pair, t);
    }
    std::vector<Encoding> encs;
    encs.push_back(std::move(encoding));
    if (pair) encs.push_back(std::move(*pair));
    Encoding final_enc;
    if (post_processor_) {
        // HF PostProcessor::process: sequence ids and type ids by position first.
        for (size_t i = 0; i < encs.size(); ++i) {
            encs[i].set_sequence_id(i);
            for (Encoding& o : encs[i].overflowing) o.set_sequence_id(i);
            encs[i].set_type_ids(static_cast<uint32_t>(i));
        }
        post_processor_->process_encodings(encs, add_special_tokens);
        final_enc = Encoding::merge(encs, false);
    } else if (encs.size() == 1) {
        final_enc = std::move(encs[0]);
    } else {
        for (size_t i = 0; i < encs.size(); ++i) encs[i].set_sequence_id(i);
        Encoding merged;
        for (Encoding& e : encs) merged.merge_with(e, false);
        final_enc = std::move(merged);
    }
    if (padding) {
        const PaddingParams& p = *padding;
        const size_t target = padded_length(p.batch_longest ? final_enc.size() : p.fixed_length, p);
        final_enc.pad(target, p.pad_id, p.pad_type_id, p.pad_token, p.direction);
    }
    return final_enc;
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    return encode(text, std::nullopt, add_special_tokens);
}

Encoding Tokenizer::encode(std::string_view text, std::optional<std::string_view> pair, bool add_special_tokens) const {
    return encode_with(text, pair, add_special_tokens, truncation_, padding_);
}

Encoding Tokenizer::encode_with(std::string_view text, std::optional<std::string_view> pair, bool add_special_tokens,
                                const std::optional<TruncationParams>& truncation,
                                const std::optional<PaddingParams>& padding) const {
    Encoding enc = encode_single(text, 0);
    std::optional<Encoding> pair_enc;
    if (pair) pair_enc = encode_single(*pair, 1);
    return post_process(std::move(enc), std::move(pair_enc), add_special_tokens, truncation, padding);
}

void Tokenizer::pad_batch(std::vector<Encoding>& encodings) const {
    if (!padding_ || encodings.empty()) return;
    const PaddingParams& p = *padding_;
    size_t length = p.fixed_length;
    if (p.batch_longest) {
        length = 0;
        for (const Encoding& e : encodings) length = std::max(length, e.size());
    }
    length = padded_length(length, p);
    for (Encoding& e : encodings) e.pad(length, p.pad_id, p.pad_type_id, p.pad_token, p.direction);
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<EncodeInput>& inputs, bool add_special_tokens,
                                              int n_threads) const {
    std::vector<Encoding> out(inputs.size());
    std::exception_ptr error;
    const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
    for (size_t i = 0; i < inputs.size(); ++i) {
        try {
            const auto& in = inputs[i];
            out[i] = in.pair ? encode(in.text, std::string_view(*in.pair), add_special_tokens)
                             : encode(in.text, std::nullopt, add_special_tokens);
        } catch (...) {
#pragma omp critical(loom_tokenizer_error)
            if (!error) error = std::current_exception();
        }
    }
    if (error) std::rethrow_exception(error);
    pad_batch(out);
    return out;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                              int n_threads) const {
    std::vector<Encoding> out(texts.size());
    std::exception_ptr error;
    const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
    for (size_t i = 0; i < texts.size(); ++i) {
        try {
            out[i] = encode(texts[i], std::nullopt, add_special_tokens);
        } catch (...) {
#pragma omp critical(loom_tokenizer_error)
            if (!error) error = std::current_exception();
        }
    }
    if (error) std::rethrow_exception(error);
    pad_batch(out);
    return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (uint32_t id : ids) {
        const std::string* tok = nullptr;
        if (const AddedToken* a = added_.find(id)) {
            tok = &a->content;
        } else {
            tok = model_->id_to_token(id);
        }
        if (!tok) continue;
        if (skip_special_tokens && added_.is_special(*tok)) continue;
        tokens.push_back(*tok);
    }
    if (!decoder_) {
        std::string out;
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (i) out += ' ';
            out += tokens[i];
        }
        return out;
    }
    if (tokens.empty()) return {};
    decoder_->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
    return added_.token_to_id(token, *model_);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
    if (const AddedToken* a = added_.find(id)) return a->content;
    if (const std::string* t = model_->id_to_token(id)) return *t;
    return std::nullopt;
}

size_t Tokenizer::vocab_size(bool with_added) const {
    if (!with_added) return model_->vocab_size();
    size_t extra = 0;
    for (const auto& [id, tok] : added_.by_id())
        if (!model_->token_to_id(tok.content)) ++extra;
    return model_->vocab_size() + extra;
}

}  // namespace loom::tokenizer
