// Shared pieces of the per-task featurizers (featurize_*.cpp); not a public
// interface. Encoding runs on all cores with an explicit truncation per call
// (Tokenizer::encode_with), so the caller's Tokenizer is never mutated.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "data/features.h"
#include "tokenizer/tokenizer.h"

namespace loom::detail {

// "file:line" (or "file (record n)") of a record, with the reader's file
// list from the options when given.
std::string record_origin(const Record& r, const FeaturizeOptions& opts);

struct EncodeJob {
    std::string_view text;
    std::optional<std::string_view> pair;
};

// Encodes every job with the same settings, in parallel (OpenMP, dynamic
// schedule). A tokenizer error names the failing record through `origin_of(i)`.
template <class OriginOf>
std::vector<tokenizer::Encoding> encode_all(const Tokenizer& tok, const std::vector<EncodeJob>& jobs,
                                            bool add_special_tokens,
                                            const std::optional<tokenizer::TruncationParams>& trunc,
                                            int n_threads, OriginOf&& origin_of);

// Non-template core of encode_all: returns the index of the first job that
// failed and its message through `failed` / `message` (-1 when none did).
std::vector<tokenizer::Encoding> encode_all_raw(const Tokenizer& tok, const std::vector<EncodeJob>& jobs,
                                                bool add_special_tokens,
                                                const std::optional<tokenizer::TruncationParams>& trunc,
                                                int n_threads, int64_t& failed, std::string& message);

template <class OriginOf>
std::vector<tokenizer::Encoding> encode_all(const Tokenizer& tok, const std::vector<EncodeJob>& jobs,
                                            bool add_special_tokens,
                                            const std::optional<tokenizer::TruncationParams>& trunc,
                                            int n_threads, OriginOf&& origin_of) {
    int64_t failed = -1;
    std::string message;
    auto out = encode_all_raw(tok, jobs, add_special_tokens, trunc, n_threads, failed, message);
    LOOM_CHECK(failed < 0, "{}: tokenizing failed: {}", origin_of(failed), message);
    return out;
}

// Feature ids/type_ids from an encoding (no padding is ever present here).
void copy_ids(Feature& f, const tokenizer::Encoding& e);

FeatureSet featurize_seq_cls(const std::vector<Record>& records, const Tokenizer& tok,
                             const FeaturizeOptions& opts);
FeatureSet featurize_lm(const std::vector<Record>& records, const Tokenizer& tok,
                        const FeaturizeOptions& opts);
FeatureSet featurize_qa(const std::vector<Record>& records, const Tokenizer& tok,
                        const FeaturizeOptions& opts);

}  // namespace loom::detail
