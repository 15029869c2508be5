// Shard files and index.json (see shard_writer.h and shard_format.h).
#include "data/shard_writer.h"

#include <filesystem>

#include "core/check.h"
#include "data/shard_format.h"
#include "io/file_utils.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace shard {

uint64_t fnv1a64(std::string_view bytes) {
    uint64_t h = 1469598103934665603ull;
    for (const char c : bytes) {
        h ^= uint8_t(c);
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace shard

namespace {

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}
void append_u64s(AtomicFileWriter& w, const std::vector<uint64_t>& v) {
    std::vector<uint8_t> b(v.size() * 8);
    for (size_t i = 0; i < v.size(); ++i) put_u64(b, i * 8, v[i]);
    w.write(b.data(), b.size());
}
void pad_to_8(AtomicFileWriter& w, uint64_t written) {
    static const char zeros[8] = {};
    if (written % 8) w.write(zeros, size_t(8 - written % 8));
}

std::string shard_name(size_t k) {
    return fmt::format("shard-{:05d}.bin", k);
}

}  // namespace

std::string tokenizer_hash_hex(const std::string& path) {
    return fmt::format("{:016x}", shard::fnv1a64(read_file(path)));
}

ShardWriter::ShardWriter(std::string dir, ShardWriterOptions options)
    : dir_(std::move(dir)), opt_(std::move(options)) {
    LOOM_CHECK(opt_.vocab_size > 0, "shard writer: vocab_size must be positive");
    id_bytes_ = opt_.vocab_size <= 65536 ? 2 : 4;
    ensure_dir(dir_);
    LOOM_CHECK(!fs::exists(fs::path(dir_) / shard::k_index_name),
               "{} already holds a shard folder (index.json); choose an empty output folder or "
               "delete it first",
               dir_);
}

void ShardWriter::add_sequence(std::span<const uint32_t> ids, uint32_t pair_start,
                               uint8_t sop_label) {
    LOOM_CHECK(!ids.empty(), "shard writer: empty sequence");
    LOOM_CHECK(pair_start < ids.size(),
               "shard writer: pair start {} outside a sequence of {} tokens", pair_start,
               ids.size());
    const size_t at = ids_.size();
    ids_.resize(at + ids.size() * size_t(id_bytes_));
    for (size_t i = 0; i < ids.size(); ++i) {
        LOOM_CHECK(int64_t(ids[i]) < opt_.vocab_size,
                   "shard writer: id {} is outside the vocabulary of {}", ids[i], opt_.vocab_size);
        const size_t p = at + i * size_t(id_bytes_);
        ids_[p] = uint8_t(ids[i]);
        ids_[p + 1] = uint8_t(ids[i] >> 8);
        if (id_bytes_ == 4) {
            ids_[p + 2] = uint8_t(ids[i] >> 16);
            ids_[p + 3] = uint8_t(ids[i] >> 24);
        }
    }
    seqs_.push_back(seqs_.back() + ids.size());
    pairs_.push_back(pair_start);
    sop_.push_back(sop_label);
    ++n_sequences_;
    n_tokens_ += ids.size();
    if (ids_.size() >= opt_.shard_bytes) flush_shard();
}

void ShardWriter::add_document_start(uint64_t token_offset) {
    LOOM_CHECK(doc_starts_.empty() ? token_offset >= shard_first_token_
                                   : token_offset >= doc_starts_.back(),
               "shard writer: document starts must not go backwards ({})", token_offset);
    doc_starts_.push_back(token_offset);
}

void ShardWriter::flush_shard() {
    const uint64_t n_seq = seqs_.size() - 1;
    if (n_seq == 0) return;
    const uint64_t n_tok = seqs_.back();
    const uint64_t shard_end = shard_first_token_ + n_tok;
    std::vector<uint64_t> docs;
    size_t used = 0;
    while (used < doc_starts_.size() && doc_starts_[used] < shard_end)
        docs.push_back(doc_starts_[used++] - shard_first_token_);
    doc_starts_.erase(doc_starts_.begin(), doc_starts_.begin() + std::ptrdiff_t(used));
    docs.push_back(n_tok);
    const uint64_t n_doc = docs.size() - 1;

    const size_t k = shards_.size();
    json h = folder_fields();
    h.update(json{{"shard_index", k},
                  {"first_sequence", n_sequences_ - n_seq},
                  {"sequences", n_seq},
                  {"tokens", n_tok},
                  {"documents", n_doc}});
    const std::string hj = h.dump();
    const shard::ShardLayout l = shard::shard_layout(hj.size(), uint32_t(id_bytes_), n_seq, n_tok,
                                                     n_doc, opt_.sentence_order);

    std::vector<uint8_t> fixed(shard::k_fixed_bytes, 0);
    std::copy(shard::k_magic.begin(), shard::k_magic.end(), fixed.begin());
    put_u32(fixed, 8, shard::k_version);
    put_u32(fixed, 12, uint32_t(id_bytes_));
    put_u64(fixed, 16, n_seq);
    put_u64(fixed, 24, n_tok);
    put_u64(fixed, 32, n_doc);
    put_u64(fixed, 40, hj.size());
    put_u64(fixed, 48, l.end);
    put_u32(fixed, 56, opt_.sentence_order ? shard::k_flag_pairs : 0);

    const std::string name = shard_name(k);
    AtomicFileWriter w((fs::path(dir_) / name).string());
    w.write(fixed.data(), fixed.size());
    w.write(hj);
    pad_to_8(w, hj.size());
    w.write(ids_.data(), ids_.size());
    pad_to_8(w, ids_.size());
    append_u64s(w, seqs_);
    append_u64s(w, docs);
    if (opt_.sentence_order) {
        std::vector<uint8_t> b(pairs_.size() * 4);
        for (size_t i = 0; i < pairs_.size(); ++i) put_u32(b, i * 4, pairs_[i]);
        w.write(b.data(), b.size());
        w.write(sop_.data(), sop_.size());
        pad_to_8(w, sop_.size());
    }
    LOOM_ASSERT(w.bytes_written() == l.end, "shard {}: wrote {} bytes, the layout says {}", name,
                w.bytes_written(), l.end);
    w.commit();
    shards_.push_back({{"file", name},
                       {"sequences", n_seq},
                       {"tokens", n_tok},
                       {"documents", n_doc},
                       {"bytes", l.end}});
    n_documents_ += n_doc;
    shard_first_token_ = shard_end;
    ids_.clear();
    seqs_.assign(1, 0);
    pairs_.clear();
    sop_.clear();
}

// What every shard header and index.json say about the whole folder.
json ShardWriter::folder_fields() const {
    return {{"format", std::string(shard::k_format_name)},
            {"version", shard::k_version},
            {"task", std::string(task_name(opt_.task))},
            {"dtype", id_bytes_ == 2 ? "uint16" : "uint32"},
            {"vocab_size", opt_.vocab_size},
            {"max_seq_length", opt_.max_seq_length},
            {"sentence_order", opt_.sentence_order},
            {"tokenizer_hash", opt_.tokenizer_hash}};
}

json ShardWriter::finish() {
    flush_shard();
    LOOM_CHECK(n_sequences_ > 0,
               "preprocess: no sequence was made, so there is nothing to write to {}", dir_);
    json idx = folder_fields();
    idx.update(json{{"sequences", n_sequences_},
                    {"tokens", n_tokens_},
                    {"documents", n_documents_},
                    {"shards", shards_}});
    for (const auto& [k, v] : opt_.extra.items())
        if (!idx.contains(k)) idx[k] = v;
    write_file_atomic((fs::path(dir_) / shard::k_index_name).string(), idx.dump(2) + "\n");
    return idx;
}

}  // namespace loom
