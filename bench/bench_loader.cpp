// Data pipeline throughput: featurizing (tokenize + truncate/pack/window) and
// the Loader's batch production, on real English text (Debian's fortune
// cookies) with the bert-base-uncased tokenizer. Not a test.
//
//   bench_loader [--corpus-mb N] [--threads N]
// Prints records/s and tokens/s per task, then batches/s the Loader's
// producer sustains for masked LM (B = 32, T = 128) and how long next()
// waited when the consumer takes no time at all.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/features.h"
#include "data/loader.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> fortunes(double mb) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes"))
        if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<std::string> base;
    for (const auto& p : files) {
        std::ifstream f(p, std::ios::binary);
        std::string line, cur;
        while (std::getline(f, line)) {
            if (line == "%") {
                if (!cur.empty()) base.push_back(cur);
                cur.clear();
            } else {
                cur += line + "\n";
            }
        }
        if (!cur.empty()) base.push_back(cur);
    }
    std::vector<std::string> out;
    size_t bytes = 0;
    while (!base.empty() && double(bytes) < mb * 1e6)
        for (const auto& s : base) {
            out.push_back(s);
            bytes += s.size();
            if (double(bytes) >= mb * 1e6) break;
        }
    return out;
}

void report(const char* what, const loom::FeatureSet& set, double s, size_t bytes) {
    std::printf("%-34s %8zu records %8zu features %10lld tokens %7.3f s %8.2f MB/s %10.0f tokens/s\n", what,
                size_t(set.stats.records), set.features.size(), (long long)set.stats.tokens, s,
                double(bytes) / 1e6 / s, double(set.stats.tokens) / s);
}

}  // namespace

int main(int argc, char** argv) {
    double mb = 4;
    int threads = omp_get_max_threads();
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--corpus-mb") mb = std::atof(argv[i + 1]);
        if (a == "--threads") threads = std::atoi(argv[i + 1]);
    }
    const std::string dir = fs::path(__FILE__).parent_path().parent_path() / "tests" / "data";
    const auto tok = loom::Tokenizer::from_file(dir + "/tokenizers/bert-base-uncased/tokenizer.json");
    const auto texts = fortunes(mb);
    size_t bytes = 0;
    std::vector<loom::Record> lm;
    for (const auto& t : texts) {
        loom::Record r;
        r.text = t;
        lm.push_back(std::move(r));
        bytes += t.size();
    }
    std::printf("corpus: %zu fortunes, %.1f MB; %d threads\n", texts.size(), double(bytes) / 1e6, threads);

    loom::FeaturizeOptions o;
    o.n_threads = threads;
    o.max_seq_length = 128;
    o.task = loom::Task::masked_lm;
    auto t0 = Clock::now();
    auto mlm = loom::featurize(lm, tok, o);
    report("masked-lm, line by line, 128", mlm, seconds_since(t0), bytes);
    o.packing = true;
    t0 = Clock::now();
    auto packed = std::make_shared<loom::FeatureSet>(loom::featurize(lm, tok, o));
    report("masked-lm, packed, 128", *packed, seconds_since(t0), bytes);

    // QA: the first line of a fortune asks, the whole fortune is the context.
    std::vector<loom::Record> qa;
    for (const auto& t : texts) {
        loom::Record r;
        r.question = t.substr(0, std::min<size_t>(t.find('\n'), 40));
        r.context = t;
        r.answers.push_back({r.question, 0, 0});
        qa.push_back(std::move(r));
    }
    loom::FeaturizeOptions q;
    q.n_threads = threads;
    q.task = loom::Task::question_answering;
    q.max_seq_length = 64;
    q.doc_stride = 16;
    t0 = Clock::now();
    auto qs = loom::featurize(qa, tok, q);
    report("question-answering, 64 / stride 16", qs, seconds_since(t0), bytes);

    loom::LoaderOptions lo;
    lo.batch_size = 32;
    lo.mask_id = 103;
    lo.vocab_size = 30522;
    lo.special_ids = {0, 100, 101, 102, 103};
    lo.prefetch = 8;
    loom::Loader loader(packed, lo);
    loom::TokenBatch b;
    int64_t n = 0, tokens = 0;
    t0 = Clock::now();
    while (loader.next(b)) {
        ++n;
        tokens += b.B * b.T;
    }
    const double s = seconds_since(t0);
    std::printf("loader masked-lm B=32 T=128: %lld batches in %.3f s = %.0f batches/s (%.2f M tokens/s); "
                "next() waited %.3f s\n",
                (long long)n, s, double(n) / s, double(tokens) / s / 1e6, loader.wait_seconds());
    t0 = Clock::now();
    int64_t count = 0;
    for (int64_t k = 0; k < loader.batches_per_epoch(); k += 8) count += loader.global_label_count({1, k}, 8);
    std::printf("global_label_count over an epoch (steps of 8 batches): %.3f s, %lld labels\n", seconds_since(t0),
                (long long)count);
    return 0;
}
