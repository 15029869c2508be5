// Preprocess: read -> tokenize (batches on all cores) -> pack -> ShardWriter.
#include "data/preprocess.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "core/check.h"
#include "data/shard_format.h"
#include "data/shard_writer.h"
#include "io/object_store.h"
#include "io/uri.h"
#include "tokenizer/tokenizer.h"

namespace loom {

namespace {

namespace fs = std::filesystem;
namespace tk = loom::tokenizer;

// The special tokens the tokenizer's post-processor puts around one or two
// segments, found by encoding placeholders and reading special_tokens_mask.
struct Template {
    std::vector<uint32_t> prefix, middle, suffix;
};

Template special_template(const tk::Tokenizer& tok, bool pair) {
    const tk::Encoding e =
        pair ? tok.encode("a", std::string_view("b"), true) : tok.encode("a", true);
    Template t;
    int part = 0;  // 0 prefix, 1 middle, 2 suffix
    int segments_seen = 0;
    bool in_content = false;
    for (size_t i = 0; i < e.ids.size(); ++i) {
        if (e.special_tokens_mask[i]) {
            if (in_content) {
                in_content = false;
                part = (pair && segments_seen == 1) ? 1 : 2;
            }
            (part == 0 ? t.prefix : part == 1 ? t.middle : t.suffix).push_back(e.ids[i]);
        } else if (!in_content) {
            in_content = true;
            ++segments_seen;
        }
    }
    return t;
}

// splitmix64: a draw keyed by (seed, document, chunk), independent of threads.
uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

bool sentence_end(const std::string& token) {
    // WordPiece ".", SentencePiece "▁." or ".", byte-level "." / "Ġ.".
    const std::string_view t(token);
    const char c = t.empty() ? '\0' : t.back();
    return (c == '.' || c == '!' || c == '?') && t.size() <= 4;
}

class Packer {
  public:
    Packer(const PreprocessOptions& o, const tk::Tokenizer& tok, ShardWriter& w) : o_(o), w_(w) {
        if (o.task == Task::masked_lm) {
            single_ = special_template(tok, false);
            pair_ = special_template(tok, true);
        } else {
            std::string eos = o.eos_token;
            if (eos.empty()) {
                for (const char* c : {"<|endoftext|>", "</s>", "[SEP]"})
                    if (tok.token_to_id(c)) {
                        eos = c;
                        break;
                    }
            }
            LOOM_CHECK(!eos.empty() && tok.token_to_id(eos),
                       "preprocess: the tokenizer has no end-of-text token{}; name one with "
                       "--eos-token",
                       eos.empty() ? "" : " '" + eos + "'");
            eos_ = *tok.token_to_id(eos);
        }
    }

    void add_document(const tk::Encoding& e) {
        if (e.ids.empty()) return;
        ++documents_;
        if (o_.task == Task::causal_lm) {
            if (!stream_.empty() || stream_written_ > 0) stream_.push_back(eos_);
            doc_starts_.push_back(stream_written_ + stream_.size());
            stream_.insert(stream_.end(), e.ids.begin(), e.ids.end());
            flush_stream();
            return;
        }
        const Template& t = o_.sentence_order ? pair_ : single_;
        const int64_t budget =
            o_.max_seq_length - int64_t(t.prefix.size() + t.middle.size() + t.suffix.size());
        LOOM_CHECK(budget >= (o_.sentence_order ? 2 : 1),
                   "preprocess: max_seq_length {} leaves no room for text after the special "
                   "tokens",
                   o_.max_seq_length);
        w_.add_document_start(w_.tokens());
        int64_t chunk = 0;
        for (size_t at = 0; at < e.ids.size(); at += size_t(budget), ++chunk) {
            const size_t n = std::min(e.ids.size() - at, size_t(budget));
            if (!o_.sentence_order) {
                seq_.assign(t.prefix.begin(), t.prefix.end());
                seq_.insert(seq_.end(), e.ids.begin() + long(at), e.ids.begin() + long(at + n));
                seq_.insert(seq_.end(), t.suffix.begin(), t.suffix.end());
                w_.add_sequence(seq_);
                continue;
            }
            if (n < 2) continue;  // one token cannot make two segments
            const uint64_t key =
                mix(o_.seed ^ mix(uint64_t(documents_) * 1000003 + uint64_t(chunk)));
            std::vector<size_t> ends;  // split points: after a sentence end
            for (size_t i = at; i + 1 < at + n; ++i)
                if (sentence_end(e.tokens[i])) ends.push_back(i + 1 - at);
            const size_t split = ends.empty() ? n / 2 : ends[key % ends.size()];
            const bool swap = (mix(key) & 1) != 0;
            auto a = e.ids.begin() + long(at), b = e.ids.begin() + long(at + split),
                 end = e.ids.begin() + long(at + n);
            seq_.assign(t.prefix.begin(), t.prefix.end());
            if (swap)
                seq_.insert(seq_.end(), b, end);
            else
                seq_.insert(seq_.end(), a, b);
            seq_.insert(seq_.end(), t.middle.begin(), t.middle.end());
            const auto pair_start = uint32_t(seq_.size());
            if (swap)
                seq_.insert(seq_.end(), a, b);
            else
                seq_.insert(seq_.end(), b, end);
            seq_.insert(seq_.end(), t.suffix.begin(), t.suffix.end());
            w_.add_sequence(seq_, pair_start, swap ? 1 : 0);
        }
    }

    int64_t documents() const { return documents_; }

  private:
    // Causal LM: whole sequences out of the joined stream.
    void flush_stream() {
        const size_t L = size_t(o_.max_seq_length);
        size_t at = 0;
        while (stream_.size() - at >= L) {
            for (uint64_t d : doc_starts_)
                if (d >= stream_written_ && d < stream_written_ + L)
                    w_.add_document_start(w_.tokens() + (d - stream_written_));
            std::erase_if(doc_starts_, [&](uint64_t d) { return d < stream_written_ + L; });
            w_.add_sequence(std::span<const uint32_t>(stream_.data() + at, L));
            at += L;
            stream_written_ += L;
        }
        stream_.erase(stream_.begin(), stream_.begin() + long(at));
    }

    const PreprocessOptions& o_;
    ShardWriter& w_;
    Template single_, pair_;
    uint32_t eos_ = 0;
    std::vector<uint32_t> seq_;
    std::vector<uint32_t> stream_;      // causal LM: joined tokens not yet cut
    std::vector<uint64_t> doc_starts_;  // causal LM: document starts, stream positions
    uint64_t stream_written_ = 0;       // causal LM: stream tokens already cut
    int64_t documents_ = 0;
};

// Tokenizes and packs into the local folder o.output.
PreprocessReport preprocess_folder(const PreprocessOptions& o) {
    LOOM_CHECK(o.task == Task::masked_lm || o.task == Task::causal_lm,
               "preprocess: --task must be masked-lm or causal-lm, got {}", task_name(o.task));
    LOOM_CHECK(!o.sentence_order || o.task == Task::masked_lm,
               "preprocess: --sentence-order pairs segments for masked LM only");
    LOOM_CHECK(o.max_seq_length >= 2, "preprocess: --max-seq-length must be at least 2, got {}",
               o.max_seq_length);
    LOOM_CHECK(!o.inputs.empty(), "preprocess: no --input given");
    const auto t0 = std::chrono::steady_clock::now();
    tk::Tokenizer tok = tk::Tokenizer::from_file(o.tokenizer_path);
    tok.set_truncation(std::nullopt);  // documents are cut by packing, not truncated
    tok.set_padding(std::nullopt);

    ShardWriterOptions wo;
    wo.task = o.task;
    wo.vocab_size = int64_t(tok.vocab_size(true));
    wo.max_seq_length = o.max_seq_length;
    wo.sentence_order = o.sentence_order;
    wo.tokenizer_hash = tokenizer_hash_hex(o.tokenizer_path);
    wo.shard_bytes = o.shard_bytes;
    wo.extra = {{"tokenizer", fs::path(o.tokenizer_path).filename().string()},
                {"inputs", o.inputs}};
    ShardWriter writer(o.output, wo);
    Packer packer(o, tok, writer);

    PreprocessReport rep;
    ReadOptions ro;
    ro.kind = RecordKind::text;
    ro.text_column = o.text_column;
    ro.sample_by = o.sample_by;
    std::vector<std::string> batch;
    auto flush = [&] {
        if (batch.empty()) return;
        const auto enc = tok.encode_batch(batch, /*add_special_tokens=*/false, o.threads);
        for (const auto& e : enc) packer.add_document(e);
        for (const auto& s : batch) rep.text_bytes += s.size();
        batch.clear();
        if (o.progress) o.progress(rep.text_bytes);
    };
    for (const std::string& in : o.inputs) {
        auto reader = open_records(in, ro);
        Record r;
        while (reader->next(r)) {
            batch.push_back(std::move(r.text));
            if (int64_t(batch.size()) >= o.batch_documents) flush();
        }
        for (const auto& f : reader->files()) rep.files.push_back(f);
        rep.text_files += reader->report().text_files;
    }
    flush();
    LOOM_CHECK(writer.sequences() > 0,
               "preprocess: the inputs made no sequence of at most {} tokens (causal LM needs at "
               "least one full sequence)",
               o.max_seq_length);
    writer.finish();
    rep.documents = packer.documents();
    rep.sequences = int64_t(writer.sequences());
    rep.tokens = int64_t(writer.tokens());
    rep.id_bytes = writer.id_bytes();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
}

// "s3:/b/p", "s3:b/p", "https:x": a URI missing its "//" would otherwise
// become a local folder named "s3:".
bool looks_like_broken_uri(const std::string& path) {
    const std::string first = path.substr(0, path.find('/'));
    if (first.size() < 2 || first.back() != ':') return false;
    return std::all_of(first.begin(), first.end() - 1, [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
    });
}

// Shards for an object store are written to a staging folder in the cache and
// uploaded with index.json last: readers take a prefix for a shard folder
// only once its index.json is there, so a stopped upload is never read.
PreprocessReport preprocess_to_store(const PreprocessOptions& o) {
    Uri u;
    try {
        u = parse_uri(o.output);
    } catch (const Error& e) {
        LOOM_FAIL("--output: {}", e.what());
    }
    LOOM_CHECK(u.scheme == UriScheme::s3,
               "--output {}: http(s) URLs can only be read; write shards to a local folder or an "
               "s3://bucket/prefix",
               o.output);
    auto store = open_object_store(o.output);
    const std::string index(shard::k_index_name);
    std::vector<std::string> stale;  // shards of a stopped upload (no index.json)
    for (const auto& obj : store->list("")) {
        LOOM_CHECK(obj.name != index,
                   "--output {}: already holds a shard folder ({}); choose another prefix or "
                   "delete it first",
                   o.output, store->uri_of(index));
        LOOM_CHECK(obj.name.starts_with("shard-") && obj.name.ends_with(".bin"),
                   "--output {}: the prefix holds other objects ({}); choose an empty prefix",
                   o.output, store->uri_of(obj.name));
        stale.push_back(obj.name);
    }
    for (const auto& name : stale) store->remove(name);

    PreprocessOptions staged = o;
    staged.output =
        (fs::path(remote_cache_dir()) / "preprocess" / fmt::format("staging-{}", ::getpid()))
            .string();
    fs::remove_all(staged.output);
    struct RemoveStaging {
        std::string dir;
        ~RemoveStaging() {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    } cleanup{staged.output};
    PreprocessReport rep = preprocess_folder(staged);
    try {
        rep.uploaded_files = upload_folder(staged.output, *store, "", {index});
    } catch (const Error& e) {
        LOOM_FAIL(
            "uploading the shards to {} stopped: {}\nHINT: readers ignore the prefix until its "
            "index.json arrives; run the same `loom preprocess` again to replace what was "
            "uploaded",
            o.output, e.what());
    }
    return rep;
}

}  // namespace

PreprocessReport preprocess(const PreprocessOptions& o) {
    LOOM_CHECK(!o.output.empty(), "preprocess: no --output given");
    if (is_remote_uri(o.output) || o.output.find("://") != std::string::npos)
        return preprocess_to_store(o);
    LOOM_CHECK(!looks_like_broken_uri(o.output),
               "--output {}: looks like a URI without its '//' (expected s3://bucket/prefix or a "
               "local folder)",
               o.output);
    return preprocess_folder(o);
}

}  // namespace loom
