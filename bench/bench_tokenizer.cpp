// Tokenizer throughput: encode ~10 MB of real English text (Debian's fortune
// cookies, repeated) with the bert-base-uncased and GPT-2 tokenizers, on one
// thread and on all cores. Prints MB/s and tokens/s. Not a test.
//
//   bench_tokenizer [--tokenizer FILE]... [--corpus FILE] [--mb N]
//                   [--threads N] [--write-corpus FILE]
// Inputs are the individual fortunes (records separated by a line "%").
// bench/tokenizer_vs_hf.sh runs this next to HF tokenizers on the same corpus.
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

#include "tokenizer/tokenizer.h"

namespace tk = loom::tokenizer;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_records(const std::string& text) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line == "%") {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += line;
            cur += '\n';
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Fortune files are plain text with "%" separator lines; .dat files are indexes.
std::string fortunes_text() {
    std::string all;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes"))
        if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        all += read_file(p.string());
        if (!all.empty() && all.back() != '\n') all += '\n';
        all += "%\n";
    }
    return all;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> tokenizers;
    std::string corpus_path, write_corpus;
    double mb = 10.0;
    int threads = omp_get_max_threads();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--tokenizer") {
            tokenizers.push_back(next());
        } else if (a == "--corpus") {
            corpus_path = next();
        } else if (a == "--mb") {
            mb = std::stod(next());
        } else if (a == "--threads") {
            threads = std::stoi(next());
        } else if (a == "--write-corpus") {
            write_corpus = next();
        } else {
            std::fprintf(stderr,
                         "usage: bench_tokenizer [--tokenizer FILE]... [--corpus FILE] [--mb N] [--threads N] "
                         "[--write-corpus FILE]\n");
            return 2;
        }
    }
    // Corpus: fortunes repeated up to `mb` megabytes.
    std::vector<std::string> records;
    if (!corpus_path.empty()) {
        records = split_records(read_file(corpus_path));
    } else {
        const std::vector<std::string> base = split_records(fortunes_text());
        if (base.empty()) {
            std::fprintf(stderr, "no fortunes found under /usr/share/games/fortunes (apt-get install fortunes)\n");
            return 1;
        }
        size_t bytes = 0;
        for (size_t k = 0; bytes < mb * 1e6; ++k) {
            records.push_back(base[k % base.size()]);
            bytes += records.back().size();
        }
    }
    size_t total_bytes = 0;
    for (const auto& r : records) total_bytes += r.size();
    if (!write_corpus.empty()) {
        std::ofstream out(write_corpus, std::ios::binary);
        for (const auto& r : records) out << r << "%\n";
        std::printf("wrote %zu records, %.2f MB to %s\n", records.size(), total_bytes / 1e6, write_corpus.c_str());
        if (tokenizers.empty()) return 0;
    }
    if (tokenizers.empty()) {
        // The fixtures next to this source file (CMake passes absolute paths in __FILE__).
        const std::string data = (fs::path(__FILE__).parent_path().parent_path() / "tests/data/tokenizers/").string();
        tokenizers = {data + "bert-base-uncased/tokenizer.json", data + "gpt2/tokenizer.json"};
    }
    std::printf("corpus: %zu records, %.2f MB\n", records.size(), total_bytes / 1e6);
    for (const auto& path : tokenizers) {
        const tk::Tokenizer tok = tk::Tokenizer::from_file(path);
        for (int t : {1, threads}) {
            // Warm-up on a slice (page in the vocabulary, fill caches).
            std::vector<std::string> warm(records.begin(), records.begin() + std::min<size_t>(records.size(), 2000));
            (void)tok.encode_batch(warm, true, t);
            const auto t0 = std::chrono::steady_clock::now();
            const std::vector<tk::Encoding> encs = tok.encode_batch(records, true, t);
            const double s = seconds_since(t0);
            size_t n_tokens = 0;
            for (const auto& e : encs) n_tokens += e.size();
            std::printf("loom %-40s threads=%-2d %8.2f MB/s %12.0f tokens/s  (%zu tokens, %.3f s)\n",
                        fs::path(path).parent_path().filename().string().c_str(), t, total_bytes / 1e6 / s,
                        n_tokens / s, n_tokens, s);
            if (threads == 1) break;
        }
    }
    return 0;
}
