// Evaluation metrics (see metrics.h for the semantics each one copies).
#include "train/metrics.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/check.h"

namespace loom {

// --- classification ---------------------------------------------------------

void ClassificationCounter::add(int64_t prediction, int64_t label) {
    ++total_;
    if (prediction == label) {
        ++correct_;
        ++per_label_[label].tp;
    } else {
        ++per_label_[prediction].fp;
        ++per_label_[label].fn;
    }
}

void ClassificationCounter::add(std::span<const int64_t> predictions,
                                std::span<const int64_t> labels) {
    LOOM_CHECK(predictions.size() == labels.size(),
               "classification metrics: {} predictions but {} labels", predictions.size(),
               labels.size());
    for (size_t i = 0; i < labels.size(); ++i) add(predictions[i], labels[i]);
}

void ClassificationCounter::merge(const ClassificationCounter& other) {
    for (const auto& [label, c] : other.per_label_) {
        Counts& mine = per_label_[label];
        mine.tp += c.tp;
        mine.fp += c.fp;
        mine.fn += c.fn;
    }
    correct_ += other.correct_;
    total_ += other.total_;
}

ClassificationMetrics ClassificationCounter::compute() const {
    ClassificationMetrics m;
    m.count = total_;
    if (total_ == 0) return m;
    m.accuracy = static_cast<double>(correct_) / static_cast<double>(total_);
    // zero_division=0: an empty denominator scores 0.
    auto ratio = [](int64_t num, int64_t den) {
        return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
    };
    for (const auto& [label, c] : per_label_) {  // std::map: sorted labels
        m.labels.push_back(label);
        m.label_precision.push_back(ratio(c.tp, c.tp + c.fp));
        m.label_recall.push_back(ratio(c.tp, c.tp + c.fn));
        // sklearn's F-score form; equals 2PR/(P+R) whenever that is defined.
        m.label_f1.push_back(ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn));
        m.label_support.push_back(c.tp + c.fn);
    }
    auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0.0 : s / static_cast<double>(v.size());
    };
    m.precision = mean(m.label_precision);
    m.recall = mean(m.label_recall);
    m.f1 = mean(m.label_f1);
    return m;
}

ClassificationMetrics classification_metrics(std::span<const int64_t> predictions,
                                             std::span<const int64_t> labels) {
    ClassificationCounter c;
    c.add(predictions, labels);
    return c.compute();
}

// --- SQuAD ------------------------------------------------------------------

namespace {

// Python's str.isspace(): what str.split() splits on.
bool py_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's re \w for str patterns: alphanumeric (letters, numbers) or '_'.
bool py_word(int32_t c) {
    if (c == '_') return true;
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    switch (utf8proc_category(c)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

// string.punctuation: the 32 ASCII punctuation characters, nothing else.
bool ascii_punct(int32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

std::vector<int32_t> decode(std::string_view s) {
    std::vector<int32_t> out;
    out.reserve(s.size());
    auto p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
    while (left > 0) {
        utf8proc_int32_t cp = 0;
        utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
        if (n <= 0) {  // invalid byte: U+FFFD, as a lenient decoder would
            cp = 0xFFFD;
            n = 1;
        }
        out.push_back(cp);
        p += n;
        left -= n;
    }
    return out;
}

bool is_article(const std::vector<int32_t>& s, size_t b, size_t e) {
    size_t n = e - b;
    if (n == 1) return s[b] == 'a';
    if (n == 2) return s[b] == 'a' && s[b + 1] == 'n';
    if (n == 3) return s[b] == 't' && s[b + 1] == 'h' && s[b + 2] == 'e';
    return false;
}

// normalize_answer as code points, words separated by single spaces.
std::vector<std::vector<int32_t>> normalized_tokens(std::string_view text) {
    // lower(), then remove_punc.
    std::vector<int32_t> s;
    for (int32_t c : decode(text)) {
        c = utf8proc_tolower(c);
        if (!ascii_punct(c)) s.push_back(c);
    }
    // remove_articles: re.sub(r"\b(a|an|the)\b", " ", text). Between two \b
    // the match is a whole maximal run of word characters.
    std::vector<int32_t> t;
    for (size_t i = 0; i < s.size();) {
        if (!py_word(s[i])) {
            t.push_back(s[i++]);
            continue;
        }
        size_t j = i;
        while (j < s.size() && py_word(s[j])) ++j;
        if (is_article(s, i, j))
            t.push_back(' ');
        else
            t.insert(t.end(), s.begin() + static_cast<std::ptrdiff_t>(i),
                     s.begin() + static_cast<std::ptrdiff_t>(j));
        i = j;
    }
    // white_space_fix: " ".join(text.split()).
    std::vector<std::vector<int32_t>> tokens;
    for (size_t i = 0; i < t.size();) {
        if (py_space(t[i])) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < t.size() && !py_space(t[j])) ++j;
        tokens.emplace_back(t.begin() + static_cast<std::ptrdiff_t>(i),
                            t.begin() + static_cast<std::ptrdiff_t>(j));
        i = j;
    }
    return tokens;
}

std::string encode(const std::vector<int32_t>& cps) {
    std::string out;
    utf8proc_uint8_t buf[4];
    for (int32_t c : cps) {
        auto n = utf8proc_encode_char(c, buf);
        out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
    }
    return out;
}

std::vector<std::string> token_strings(std::string_view text) {
    std::vector<std::string> out;
    for (const auto& t : normalized_tokens(text)) out.push_back(encode(t));
    return out;
}

double f1_tokens(const std::vector<std::string>& pred, const std::vector<std::string>& gold) {
    if (pred.empty() || gold.empty()) return pred == gold ? 1.0 : 0.0;
    // Counter(pred) & Counter(gold): the multiset intersection.
    std::unordered_map<std::string, int64_t> counts;
    for (const auto& g : gold) ++counts[g];
    int64_t same = 0;
    for (const auto& p : pred) {
        auto it = counts.find(p);
        if (it != counts.end() && it->second > 0) {
            --it->second;
            ++same;
        }
    }
    if (same == 0) return 0.0;
    double precision = static_cast<double>(same) / static_cast<double>(pred.size());
    double recall = static_cast<double>(same) / static_cast<double>(gold.size());
    return 2.0 * precision * recall / (precision + recall);
}

const std::vector<std::string>& golds_or_empty(const std::vector<std::string>& golds) {
    static const std::vector<std::string> k_unanswerable = {""};
    return golds.empty() ? k_unanswerable : golds;
}

}  // namespace

std::string squad_normalize(std::string_view text) {
    std::string out;
    for (const auto& t : normalized_tokens(text)) {
        if (!out.empty()) out.push_back(' ');
        out += encode(t);
    }
    return out;
}

double squad_exact_match(std::string_view prediction, const std::vector<std::string>& golds) {
    const std::string p = squad_normalize(prediction);
    for (const auto& g : golds_or_empty(golds))
        if (squad_normalize(g) == p) return 1.0;
    return 0.0;
}

double squad_f1(std::string_view prediction, const std::vector<std::string>& golds) {
    const auto p = token_strings(prediction);
    double best = 0.0;
    for (const auto& g : golds_or_empty(golds)) best = std::max(best, f1_tokens(p, token_strings(g)));
    return best;
}

void SquadCounter::add(std::string_view prediction, const std::vector<std::string>& golds) {
    em_sum_ += squad_exact_match(prediction, golds);
    f1_sum_ += squad_f1(prediction, golds);
    ++count_;
}

void SquadCounter::merge(const SquadCounter& other) {
    em_sum_ += other.em_sum_;
    f1_sum_ += other.f1_sum_;
    count_ += other.count_;
}

SquadMetrics SquadCounter::compute() const {
    SquadMetrics m;
    m.count = count_;
    if (count_ == 0) return m;
    m.exact_match = 100.0 * em_sum_ / static_cast<double>(count_);
    m.f1 = 100.0 * f1_sum_ / static_cast<double>(count_);
    return m;
}

// --- language modelling -----------------------------------------------------

double perplexity(double mean_loss) {
    if (std::isnan(mean_loss)) return mean_loss;
    // exp overflows past ~709.78; Python raises OverflowError and HF reports inf.
    if (mean_loss > std::log(std::numeric_limits<double>::max()))
        return std::numeric_limits<double>::infinity();
    return std::exp(mean_loss);
}

TokenAccuracy masked_token_accuracy(std::span<const int64_t> predictions,
                                    std::span<const int64_t> labels, int64_t ignore_index) {
    LOOM_CHECK(predictions.size() == labels.size(),
               "masked-token accuracy: {} predictions but {} labels", predictions.size(),
               labels.size());
    TokenAccuracy a;
    for (size_t i = 0; i < labels.size(); ++i) {
        if (labels[i] == ignore_index) continue;
        ++a.total;
        a.correct += predictions[i] == labels[i];
    }
    return a;
}

std::vector<int64_t> argmax_rows(std::span<const float> logits, int64_t rows, int64_t cols) {
    LOOM_CHECK(rows >= 0 && cols > 0 && logits.size() == static_cast<size_t>(rows * cols),
               "argmax: {} logits do not form ({}, {})", logits.size(), rows, cols);
    std::vector<int64_t> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; ++c)
            if (row[c] > row[best]) best = c;  // strict: the first maximum wins
        out[static_cast<size_t>(r)] = best;
    }
    return out;
}

}  // namespace loom
