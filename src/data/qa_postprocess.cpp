// postprocess_qa_predictions (HF examples/pytorch/question-answering/utils_qa.py)
// for Loom features; the rules are in qa_postprocess.h.
//
// NOTE: candidates are drawn from the feature's own tokens only. HF ranks the
// logits of the whole padded row, so a padding position can take one of the
// n_best slots there (and is then skipped as "not in the context"); here the
// result does not depend on how the features were batched and padded.
#include "data/qa_postprocess.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace loom {

void QaLogits::store(const std::vector<int64_t>& feature_index, int64_t T, const float* start_logits,
                     const float* end_logits) {
    for (size_t b = 0; b < feature_index.size(); ++b) {
        const int64_t fi = feature_index[b];
        LOOM_CHECK(fi >= 0 && size_t(fi) < start.size(),
                   "qa logits: feature index {} outside the {} features", fi, start.size());
        const float* s = start_logits + int64_t(b) * T;
        const float* e = end_logits + int64_t(b) * T;
        start[size_t(fi)].assign(s, s + T);
        end[size_t(fi)].assign(e, e + T);
    }
}

namespace {

struct Candidate {
    int32_t begin = 0, end = 0;  // byte span in the context
    float score = 0, start_logit = 0, end_logit = 0;
    bool null = false;
};

// np.argsort(x)[-1 : -n - 1 : -1] over x[0..len): the n largest, highest
// first; equal values by higher index first (a stable argsort, reversed).
std::vector<int64_t> top_indices(const std::vector<float>& x, int64_t len, int64_t n) {
    std::vector<int64_t> idx(static_cast<size_t>(len));
    std::iota(idx.begin(), idx.end(), int64_t(0));
    auto before = [&](int64_t a, int64_t b) {
        const float xa = x[size_t(a)], xb = x[size_t(b)];
        return xa != xb ? xa > xb : a > b;
    };
    const size_t k = size_t(std::min(n, len));
    std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(), before);
    idx.resize(k);
    return idx;
}

}  // namespace

std::vector<QaPrediction> qa_postprocess(const FeatureSet& data, const QaLogits& logits,
                                         const QaPostprocessOptions& opts) {
    LOOM_CHECK(logits.start.size() == data.features.size() && logits.end.size() == data.features.size(),
               "qa postprocess: logits for {}/{} features, the data set has {}", logits.start.size(),
               logits.end.size(), data.features.size());
    LOOM_CHECK(opts.n_best_size > 0 && opts.max_answer_length > 0,
               "qa postprocess: n_best_size ({}) and max_answer_length ({}) must be positive",
               opts.n_best_size, opts.max_answer_length);
    std::vector<std::vector<int64_t>> per_example(data.examples.size());
    for (size_t fi = 0; fi < data.features.size(); ++fi) {
        const int64_t ex = data.features[fi].example_index;
        LOOM_CHECK(ex >= 0 && size_t(ex) < data.examples.size(),
                   "qa postprocess: feature {} names example {} of {}", fi, ex, data.examples.size());
        per_example[size_t(ex)].push_back(int64_t(fi));
    }

    std::vector<QaPrediction> out(data.examples.size());
    for (size_t ex = 0; ex < data.examples.size(); ++ex) {
        const Record& example = data.examples[ex];
        std::vector<Candidate> prelim;
        bool have_null = false;
        Candidate min_null;
        for (int64_t fi : per_example[ex]) {
            const Feature& f = data.features[size_t(fi)];
            const std::vector<float>& sl = logits.start[size_t(fi)];
            const std::vector<float>& el = logits.end[size_t(fi)];
            if (sl.empty() && el.empty()) continue;  // not evaluated
            const int64_t len = int64_t(f.ids.size());
            LOOM_CHECK(int64_t(sl.size()) >= len && int64_t(el.size()) >= len,
                       "qa postprocess: feature {} has {} tokens but {} start / {} end logits", fi, len,
                       sl.size(), el.size());
            const float null_score = sl[0] + el[0];
            if (!have_null || min_null.score > null_score) {
                have_null = true;
                min_null = {0, 0, null_score, sl[0], el[0], true};
            }
            const auto starts = top_indices(sl, len, opts.n_best_size);
            const auto ends = top_indices(el, len, opts.n_best_size);
            for (int64_t s : starts) {
                for (int64_t e : ends) {
                    const auto& os = f.offsets[size_t(s)];
                    const auto& oe = f.offsets[size_t(e)];
                    if (os.first < 0 || oe.first < 0) continue;  // not in the context
                    if (e < s || e - s + 1 > opts.max_answer_length) continue;
                    prelim.push_back({os.first, oe.second, sl[size_t(s)] + el[size_t(e)], sl[size_t(s)],
                                      el[size_t(e)], false});
                }
            }
        }
        const bool v2 = opts.version_2_with_negative && have_null;
        if (v2) prelim.push_back(min_null);
        // sorted(..., reverse=True) is stable: equal scores keep their order.
        std::stable_sort(prelim.begin(), prelim.end(),
                         [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
        if (int64_t(prelim.size()) > opts.n_best_size) prelim.resize(size_t(opts.n_best_size));
        if (v2 && std::none_of(prelim.begin(), prelim.end(), [](const Candidate& c) { return c.null; }))
            prelim.push_back(min_null);

        struct Pred {
            std::string text;
            const Candidate* c;  // null: HF's "empty" placeholder (logits 0)
        };
        std::vector<Pred> preds;
        for (const Candidate& c : prelim)
            preds.push_back({c.null ? std::string() : example.context.substr(size_t(c.begin), size_t(c.end - c.begin)),
                             &c});
        if (preds.empty() || (preds.size() == 1 && preds[0].text.empty()))
            preds.insert(preds.begin(), Pred{"empty", nullptr});

        QaPrediction& p = out[ex];
        p.id = example.id;
        auto take = [&](const Pred& pr) {
            p.text = pr.text;
            if (pr.c && !pr.c->null) {
                p.start_byte = pr.c->begin;
                p.end_byte = pr.c->end;
            }
            p.score = pr.c ? double(pr.c->score) : 0.0;
        };
        if (!opts.version_2_with_negative) {
            take(preds[0]);
            continue;
        }
        if (!v2) {  // no feature was evaluated: nothing to compare with
            p.text.clear();
            continue;
        }
        size_t i = 0;
        while (i + 1 < preds.size() && preds[i].text.empty()) ++i;
        const Pred& best = preds[i];
        const float s = best.c ? best.c->start_logit : 0.0f;
        const float e = best.c ? best.c->end_logit : 0.0f;
        const float diff = min_null.score - s - e;  // float32 arithmetic, as numpy does
        p.null_score_diff = double(diff);
        if (double(diff) > opts.null_score_diff_threshold) {
            p.text.clear();
            p.score = double(min_null.score);
        } else {
            take(best);
        }
    }
    return out;
}

}  // namespace loom
