// Opening and reading shard folders (shard_dataset.h, shard_format.h).
#include "data/shard_dataset.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "core/check.h"
#include "data/shard_format.h"
#include "io/byte_source.h"
#include "io/file_utils.h"
#include "io/uri.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian and read in place");

namespace {

uint32_t get_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t get_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

template <class T>
T index_value(const json& j, const char* key, const std::string& where) {
    LOOM_CHECK(j.contains(key), "{}: no '{}'", where, key);
    try {
        return j.at(key).get<T>();
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: '{}' has the wrong type ({})", where, key, e.what());
    }
}

}  // namespace

// One shard: its source, counts and the index sections (in the map, or
// copied out of a source that cannot map).
struct ShardDataset::Shard {
    std::unique_ptr<ShardSource> src;
    std::string name;
    uint64_t n_seq = 0, n_tok = 0, n_doc = 0;
    uint32_t id_bytes = 2;
    bool pairs = false;
    shard::ShardLayout layout;
    const uint8_t* map = nullptr;
    std::vector<uint8_t> copied;  // seqs..end when not mapped
    mutable std::mutex read_mu;   // unmapped sources serve one reader at a time

    const uint8_t* section(uint64_t offset) const {
        return map ? map + offset : copied.data() + (offset - layout.seqs);
    }
    uint64_t seq_offset(uint64_t i) const { return get_u64(section(layout.seqs + i * 8)); }
    uint64_t doc_offset(uint64_t i) const { return get_u64(section(layout.docs + i * 8)); }
    uint32_t pair_start(uint64_t i) const { return get_u32(section(layout.pairs + i * 4)); }
    uint8_t sop(uint64_t i) const { return *section(layout.sop + i); }
};

namespace {

// index.json of a local folder or of an s3:// / http(s):// prefix; nullopt
// when there is none (a missing object, not a failing store, for remote ones).
std::optional<std::string> read_index(const std::string& dir) {
    if (!is_remote_uri(dir)) {
        const std::string p = (fs::path(dir) / shard::k_index_name).string();
        std::error_code ec;
        if (!fs::is_regular_file(p, ec)) return std::nullopt;
        return read_file(p);
    }
    std::unique_ptr<ByteSource> src;
    try {
        src = open_byte_source(uri_join(dir, shard::k_index_name));
    } catch (const Error& e) {
        if (std::string_view(e.what()).find("404") != std::string_view::npos) return std::nullopt;
        throw;
    }
    std::string text(size_t(src->size()), '\0');
    if (!text.empty()) src->read(0, text.size(), text.data());
    return text;
}

}  // namespace

bool is_shard_folder(const std::string& path) {
    if (is_remote_uri(path)) return read_index(path).has_value();
    std::error_code ec;
    return fs::is_directory(path, ec) &&
           fs::is_regular_file(fs::path(path) / shard::k_index_name, ec);
}

ShardDataset::~ShardDataset() = default;

std::shared_ptr<const ShardDataset> ShardDataset::open(const std::string& dir,
                                                       const ShardOpener& opener) {
    const std::string index_path = uri_join(dir, shard::k_index_name);
    const std::optional<std::string> index_text = read_index(dir);
    LOOM_CHECK(index_text.has_value(),
               "{} is not a shard folder: it has no {} (write one with `loom preprocess`, or an "
               "unfinished preprocess run left it out)",
               dir, shard::k_index_name);
    json idx;
    try {
        idx = json::parse(*index_text);
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON ({})", index_path, e.what());
    }
    auto ds = std::shared_ptr<ShardDataset>(new ShardDataset());
    ShardFolderInfo& info = ds->info_;
    info.path = dir;
    info.index = idx;
    const auto format = index_value<std::string>(idx, "format", index_path);
    LOOM_CHECK(format == shard::k_format_name, "{}: format is '{}', expected '{}'", index_path,
               format, shard::k_format_name);
    const auto version = index_value<uint32_t>(idx, "version", index_path);
    LOOM_CHECK(version == shard::k_version,
               "{}: format version {} is not supported (this build reads version {})", index_path,
               version, shard::k_version);
    const auto task = task_from_name(index_value<std::string>(idx, "task", index_path));
    LOOM_CHECK(task && (*task == Task::masked_lm || *task == Task::causal_lm),
               "{}: task '{}' is not a language-modelling task", index_path,
               index_value<std::string>(idx, "task", index_path));
    info.task = *task;
    const auto dtype = index_value<std::string>(idx, "dtype", index_path);
    LOOM_CHECK(dtype == "uint16" || dtype == "uint32", "{}: dtype '{}' (expected uint16 or uint32)",
               index_path, dtype);
    info.id_bytes = dtype == "uint16" ? 2 : 4;
    info.vocab_size = index_value<int64_t>(idx, "vocab_size", index_path);
    info.max_seq_length = index_value<int64_t>(idx, "max_seq_length", index_path);
    info.sentence_order = index_value<bool>(idx, "sentence_order", index_path);
    info.tokenizer_hash = index_value<std::string>(idx, "tokenizer_hash", index_path);
    LOOM_CHECK(idx.contains("shards") && idx["shards"].is_array() && !idx["shards"].empty(),
               "{}: 'shards' must be a non-empty list", index_path);

    ds->first_seq_.push_back(0);
    for (const json& entry : idx["shards"]) {
        const auto file = index_value<std::string>(entry, "file", index_path + " shards[]");
        LOOM_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(),
                   "{}: shard file name '{}' must be a plain name in the folder", index_path, file);
        const std::string path = uri_join(dir, file);
        auto s = std::make_unique<Shard>();
        s->src = opener(path);
        s->name = s->src->name();
        const uint64_t size = s->src->size();
        uint8_t fixed[shard::k_fixed_bytes];
        LOOM_CHECK(size >= shard::k_fixed_bytes,
                   "token shard {}: truncated at byte offset {}: the fixed header needs {} bytes",
                   path, size, shard::k_fixed_bytes);
        s->src->read(0, sizeof(fixed), fixed);
        LOOM_CHECK(std::memcmp(fixed, shard::k_magic.data(), 8) == 0,
                   "token shard {}: corrupt at byte offset 0: not a Loom token shard (bad magic)",
                   path);
        const uint32_t ver = get_u32(fixed + 8);
        LOOM_CHECK(ver == shard::k_version, "token shard {}: format version {} (expected {})", path,
                   ver, shard::k_version);
        s->id_bytes = get_u32(fixed + 12);
        s->n_seq = get_u64(fixed + 16);
        s->n_tok = get_u64(fixed + 24);
        s->n_doc = get_u64(fixed + 32);
        const uint64_t json_bytes = get_u64(fixed + 40);
        const uint64_t file_bytes = get_u64(fixed + 48);
        s->pairs = (get_u32(fixed + 56) & shard::k_flag_pairs) != 0;
        LOOM_CHECK(s->id_bytes == uint32_t(info.id_bytes),
                   "token shard {}: corrupt at byte offset 12: {} bytes per id, index.json says {}",
                   path, s->id_bytes, dtype);
        LOOM_CHECK(
            s->pairs == info.sentence_order,
            "token shard {}: corrupt at byte offset 56: segment pairs {} but index.json says "
            "sentence_order {}",
            path, s->pairs, info.sentence_order);
        // Counts bounded by the size before any layout arithmetic (no overflow).
        LOOM_CHECK(
            s->n_seq <= file_bytes && s->n_tok <= file_bytes && s->n_doc <= file_bytes &&
                json_bytes <= file_bytes && file_bytes < (uint64_t(1) << 56),
            "token shard {}: corrupt header at byte offset 16: counts ({} sequences, {} tokens, "
            "{} documents) do not fit its {} bytes",
            path, s->n_seq, s->n_tok, s->n_doc, file_bytes);
        s->layout =
            shard::shard_layout(json_bytes, s->id_bytes, s->n_seq, s->n_tok, s->n_doc, s->pairs);
        LOOM_CHECK(s->layout.end == file_bytes,
                   "token shard {}: corrupt header at byte offset 48: file_bytes {} but the counts "
                   "imply {}",
                   path, file_bytes, s->layout.end);
        LOOM_CHECK(size >= file_bytes,
                   "token shard {}: truncated at byte offset {}: the header says the shard has {} "
                   "bytes ({} sequences, {} tokens); the rest is missing (an interrupted copy?)",
                   path, size, file_bytes, s->n_seq, s->n_tok);
        LOOM_CHECK(size == file_bytes,
                   "token shard {}: {} bytes past the end of the shard at byte offset {}", path,
                   size - file_bytes, file_bytes);
        const json& want = entry;
        LOOM_CHECK(index_value<uint64_t>(want, "sequences", index_path) == s->n_seq &&
                       index_value<uint64_t>(want, "tokens", index_path) == s->n_tok,
                   "token shard {}: holds {} sequences / {} tokens, index.json says {} / {}", path,
                   s->n_seq, s->n_tok, want["sequences"].dump(), want["tokens"].dump());
        s->map = s->src->mapped();
        if (!s->map) {
            s->copied.resize(size_t(s->layout.end - s->layout.seqs));
            s->src->read(s->layout.seqs, s->copied.size(), s->copied.data());
        }
        // Sequence offsets: 0, strictly increasing (no empty row), ending at n_tok.
        uint64_t prev = 0;
        for (uint64_t i = 0; i <= s->n_seq; ++i) {
            const uint64_t v = s->seq_offset(i);
            const bool ok = i == 0 ? v == 0 : (v > prev && v <= s->n_tok);
            LOOM_CHECK(
                ok,
                "token shard {}: corrupt sequence index at byte offset {}: entry {} is {} after {} "
                "(offsets must rise from 0 to {} tokens)",
                path, s->layout.seqs + i * 8, i, v, prev, s->n_tok);
            prev = v;
        }
        LOOM_CHECK(prev == s->n_tok,
                   "token shard {}: corrupt sequence index at byte offset {}: ends at {}, not {}",
                   path, s->layout.seqs + s->n_seq * 8, prev, s->n_tok);
        prev = 0;
        for (uint64_t i = 0; i <= s->n_doc; ++i) {
            const uint64_t v = s->doc_offset(i);
            LOOM_CHECK(v >= prev && v <= s->n_tok && (i < s->n_doc || v == s->n_tok),
                       "token shard {}: corrupt document index at byte offset {}: entry {} is {}",
                       path, s->layout.docs + i * 8, i, v);
            prev = v;
        }
        if (s->pairs)
            for (uint64_t i = 0; i < s->n_seq; ++i)
                LOOM_CHECK(
                    s->pair_start(i) < s->seq_offset(i + 1) - s->seq_offset(i) && s->sop(i) <= 1,
                    "token shard {}: corrupt pair index at byte offset {}: sequence {}", path,
                    s->layout.pairs + i * 4, i);
        info.sequences += int64_t(s->n_seq);
        info.tokens += int64_t(s->n_tok);
        info.documents += int64_t(s->n_doc);
        info.shard_files.push_back(path);
        ds->first_seq_.push_back(ds->first_seq_.back() + int64_t(s->n_seq));
        ds->shards_.push_back(std::move(s));
    }
    LOOM_CHECK(info.sequences == index_value<int64_t>(idx, "sequences", index_path),
               "{}: says {} sequences, the shards hold {}", index_path, idx["sequences"].dump(),
               info.sequences);
    LOOM_CHECK(info.sequences > 0, "{}: the shards hold no sequence", index_path);
    return ds;
}

int64_t ShardDataset::length(int64_t i) const {
    const size_t k =
        size_t(std::upper_bound(first_seq_.begin(), first_seq_.end(), i) - first_seq_.begin() - 1);
    const Shard& s = *shards_[k];
    const uint64_t j = uint64_t(i - first_seq_[k]);
    return int64_t(s.seq_offset(j + 1) - s.seq_offset(j));
}

const Feature& ShardDataset::row(int64_t i, Feature& out) const {
    LOOM_ASSERT(i >= 0 && i < info_.sequences, "row {} of {}", i, info_.sequences);
    const size_t k =
        size_t(std::upper_bound(first_seq_.begin(), first_seq_.end(), i) - first_seq_.begin() - 1);
    const Shard& s = *shards_[k];
    const uint64_t j = uint64_t(i - first_seq_[k]);
    const uint64_t begin = s.seq_offset(j), n = s.seq_offset(j + 1) - begin;
    const uint64_t byte0 = s.layout.ids + begin * s.id_bytes;
    out.ids.resize(size_t(n));
    std::vector<uint8_t> copy;
    const uint8_t* p;
    if (s.map) {
        p = s.map + byte0;
    } else {
        copy.resize(size_t(n * s.id_bytes));
        std::lock_guard<std::mutex> lk(s.read_mu);
        s.src->read(byte0, copy.size(), copy.data());
        p = copy.data();
    }
    for (uint64_t t = 0; t < n; ++t) {
        const uint32_t id =
            s.id_bytes == 2 ? uint32_t(p[2 * t]) | uint32_t(p[2 * t + 1]) << 8 : get_u32(p + 4 * t);
        LOOM_CHECK(int64_t(id) < info_.vocab_size,
                   "token shard {}: corrupt id {} at byte offset {} (sequence {}): the vocabulary "
                   "has {} ids",
                   s.name, id, byte0 + t * s.id_bytes, i, info_.vocab_size);
        out.ids[size_t(t)] = int32_t(id);
    }
    const uint64_t split = s.pairs && s.pair_start(j) > 0 ? s.pair_start(j) : n;
    out.type_ids.assign(size_t(n), 0);
    std::fill(out.type_ids.begin() + std::ptrdiff_t(split), out.type_ids.end(), 1);
    out.label = s.pairs ? int64_t(s.sop(j)) : -100;
    out.labels.clear();
    out.position_ids.clear();
    return out;
}

std::vector<uint64_t> ShardDataset::document_offsets(size_t k) const {
    const Shard& s = *shards_[k];
    std::vector<uint64_t> out;
    for (uint64_t i = 0; i < s.n_doc; ++i) out.push_back(s.doc_offset(i));
    return out;
}

}  // namespace loom
