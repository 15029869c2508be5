// `loom preprocess`: raw text corpora -> token shards for pretraining
// (data/preprocess.h). Prints a progress line (bytes of text, MB/s, ETA by
// input size) while it works and a summary at the end.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "config/job.h"
#include "core/check.h"
#include "data/preprocess.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct CliOptions {
    PreprocessOptions p;
    std::string task = "masked-lm";
    std::string sample_by = "line";  // as loom train reads plain text
    double shard_mb = 256;
};

// Bytes of input on disk (compressed files count as stored): the ETA's total.
uint64_t input_bytes(const std::vector<std::string>& inputs) {
    uint64_t n = 0;
    std::error_code ec;
    for (const auto& in : inputs) {
        if (fs::is_directory(in, ec)) {
            for (const auto& e : fs::recursive_directory_iterator(in, ec))
                if (e.is_regular_file(ec)) n += e.file_size(ec);
        } else if (fs::is_regular_file(in, ec)) {
            n += fs::file_size(in, ec);
        }
    }
    return n;
}

void run_preprocess(CliOptions& o) {
    const auto task = enum_from_name<Task>(o.task);
    LOOM_CHECK(task && (*task == Task::masked_lm || *task == Task::causal_lm),
               "--task: expected masked-lm or causal-lm, got '{}'", o.task);
    o.p.task = *task;
    if (o.sample_by == "line")
        o.p.sample_by = SampleBy::line;
    else if (o.sample_by == "paragraph")
        o.p.sample_by = SampleBy::paragraph;
    else if (o.sample_by == "document")
        o.p.sample_by = SampleBy::document;
    else
        LOOM_FAIL("--sample-by: expected line, paragraph or document, got '{}'", o.sample_by);
    LOOM_CHECK(o.shard_mb > 0, "--shard-mb must be positive");
    o.p.shard_bytes = uint64_t(o.shard_mb * double(1 << 20));

    const uint64_t total = input_bytes(o.p.inputs);
    const bool tty = ::isatty(::fileno(stderr)) != 0;
    const auto t0 = std::chrono::steady_clock::now();
    double last = -1;
    o.p.progress = [&](uint64_t done) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s - last < (tty ? 0.2 : 30.0)) return;
        last = s;
        const double mbs = double(done) / 1e6 / std::max(s, 1e-9);
        std::string eta = "?";
        if (total > 0 && done > 0 && done < total) {
            const double rest = s * double(total - done) / double(done);
            eta = fmt::format("{:02d}:{:02d}", int(rest) / 60, int(rest) % 60);
        }
        fmt::print(stderr, "{}tokenized {:.1f} MB of text ({:.1f} MB/s, eta {}){}", tty ? "\r" : "",
                   double(done) / 1e6, mbs, eta, tty ? "" : "\n");
        std::fflush(stderr);
    };
    const PreprocessReport r = preprocess(o.p);
    if (tty) fmt::print(stderr, "\n");
    if (r.text_files > 0)
        fmt::print("plain text ({} file(s)): one document {} (--sample-by {})\n", r.text_files,
                   sample_by_unit(o.p.sample_by), enum_name(o.p.sample_by));
    const std::string uploaded =
        r.uploaded_files > 0 ? fmt::format(" (uploaded {} files)", r.uploaded_files) : "";
    fmt::print(
        "wrote {}{}: {} documents -> {} sequences, {} tokens (uint{} ids) from {} file(s), "
        "{:.1f} MB of text in {:.1f} s ({:.2f} MB/s)\n",
        o.p.output, uploaded, r.documents, r.sequences, r.tokens, r.id_bytes * 8, r.files.size(),
        double(r.text_bytes) / 1e6, r.seconds,
        double(r.text_bytes) / 1e6 / std::max(r.seconds, 1e-9));
}

void setup_preprocess(CLI::App& app) {
    auto o = std::make_shared<CliOptions>();
    CLI::App* sub =
        app.add_subcommand("preprocess", "Tokenize raw corpora into token shards for pretraining");
    sub->footer(R"(
Token shards are what large pretraining runs read: the text is tokenized once,
on all cores, and packed into sequences; training then memory-maps the shards
and each data-parallel rank touches only its own rows. Point a job's
data.train at the output folder. An s3://bucket/prefix output is written to a
staging folder in the cache (LOOM_CACHE_DIR, else ~/.cache/loom) and uploaded,
index.json last; data.train may then name that URI (the shards are streamed).

Inputs: files or folders of plain text (.txt; one document per line by
default, as loom train reads them; --sample-by paragraph or document),
JSONL/CSV (one document per record, --text-column), each optionally .gz or
.zst.

Examples:
  loom preprocess --tokenizer bert/tokenizer.json --input wiki/ --output shards \
      --task masked-lm --max-seq-length 128
  loom preprocess --tokenizer albert/tokenizer.json --input books.txt.zst \
      --output sop --task masked-lm --sentence-order --max-seq-length 512
  loom preprocess --tokenizer gpt2/tokenizer.json --input web.jsonl.gz \
      --output clm --task causal-lm --max-seq-length 1024

masked-lm: each document is cut into chunks wrapped in the tokenizer's special
tokens ([CLS] ... [SEP]); masks are drawn fresh each epoch at training time.
--sentence-order: ALBERT's sentence-order prediction pairs ([CLS] A [SEP] B
[SEP], split at a sentence end, swapped half of the time with label 1).
causal-lm: documents are joined with the end-of-text token and cut into full
sequences.)");
    sub->add_option("--tokenizer", o->p.tokenizer_path, "tokenizer.json (Hugging Face)")
        ->required()
        ->check(CLI::ExistingFile);
    sub->add_option("--input", o->p.inputs, "input files or folders (repeatable)")->required();
    sub->add_option("--output", o->p.output, "output folder (new or empty), or s3://bucket/prefix")
        ->required();
    sub->add_option("--task", o->task, "masked-lm or causal-lm")->capture_default_str();
    sub->add_option("--max-seq-length", o->p.max_seq_length,
                    "tokens per sequence, specials included")
        ->capture_default_str();
    sub->add_flag("--sentence-order", o->p.sentence_order,
                  "masked LM: segment pairs with sentence-order labels (ALBERT)");
    sub->add_option("--text-column", o->p.text_column, "JSONL/CSV column with the text")
        ->capture_default_str();
    sub->add_option("--sample-by", o->sample_by, "plain text: line, paragraph or document")
        ->capture_default_str();
    sub->add_option("--eos-token", o->p.eos_token,
                    "causal LM separator (default: <|endoftext|> or </s>)");
    sub->add_option("--shard-mb", o->shard_mb, "token ids per shard file, in MiB")
        ->capture_default_str();
    sub->add_option("--seed", o->p.seed, "sentence-order splits and swaps")->capture_default_str();
    sub->add_option("--threads", o->p.threads, "tokenizer threads (default: all cores)");
    sub->callback([o] { run_preprocess(*o); });
}

}  // namespace

LOOM_COMMAND(setup_preprocess);

}  // namespace loom::cli
