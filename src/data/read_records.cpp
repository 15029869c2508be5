// open_records: picks the reader for each file, walks a folder in sorted
// order, applies label_map, and turns "no records at all" into a clear error
// at the end of the stream.
#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom {

namespace fs = std::filesystem;
using data_detail::FileCtx;
using data_detail::FileSource;

std::string RecordReader::origin(const Record& r) const {
    const auto& f = files();
    std::string file = r.file_index >= 0 && static_cast<size_t>(r.file_index) < f.size()
                           ? f[static_cast<size_t>(r.file_index)]
                           : std::string("?");
    if (r.line > 0) return fmt::format("{}:{}", file, r.line);
    return fmt::format("{} (record {})", file, r.index + 1);
}

namespace {

enum class Format { jsonl, json, csv, tsv, text };

const char* const k_known_extensions =
    ".jsonl, .ndjson, .json, .csv, .tsv, .txt, .text, each optionally .gz or .zst";

// By extension, after any compression suffix (.gz, .zst): "a.jsonl.gz" is JSONL.
std::optional<Format> format_of(const fs::path& path) {
    const fs::path p(std::string(strip_compression_suffix(path.string())));
    std::string ext = p.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == ".jsonl" || ext == ".ndjson") return Format::jsonl;
    if (ext == ".json") return Format::json;
    if (ext == ".csv") return Format::csv;
    if (ext == ".tsv") return Format::tsv;
    if (ext == ".txt" || ext == ".text") return Format::text;
    return std::nullopt;
}

std::vector<std::string> list_files(const std::string& path) {
    LOOM_CHECK(fs::exists(path), "data path '{}' not found", path);
    if (!fs::is_directory(path)) {
        LOOM_CHECK(format_of(path).has_value(),
                   "data file '{}': unknown format (expected one of {})", path,
                   k_known_extensions);
        return {path};
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path)) {
        std::string name = e.path().filename().string();
        if (name.starts_with(".")) continue;  // .ipynb_checkpoints, editor swap files
        LOOM_CHECK(!e.is_directory(), "data folder '{}' holds a folder '{}'; nested folders are "
                                      "not read, so move it out or point at the files",
                   path, name);
        LOOM_CHECK(format_of(e.path()).has_value(),
                   "data folder '{}': '{}' has an unknown format (expected one of {})", path, name,
                   k_known_extensions);
        files.push_back(e.path().string());
    }
    LOOM_CHECK(!files.empty(), "data folder '{}' has no data files ({})", path,
               k_known_extensions);
    std::sort(files.begin(), files.end());
    return files;
}

// A .json file is JSON lines when its first line is a complete object that
// is not a document wrapper ({"data": [...]}); otherwise one JSON document.
bool json_file_is_lines(const std::string& path) {
    data_detail::LineReader lines(path);
    std::string_view line;
    while (lines.next(line)) {
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        auto v = data_detail::json::parse(line.begin(), line.end(), nullptr, false);
        if (v.is_discarded() || !v.is_object()) return false;
        auto d = v.find("data");
        return d == v.end() || !d->is_array();
    }
    return true;  // empty: either way no records
}

class MultiFileReader : public RecordReader {
public:
    MultiFileReader(std::string path, const ReadOptions& options)
        : path_(std::move(path)), options_(options), files_(list_files(path_)) {
        if (options_.kind == RecordKind::classification)
            LOOM_CHECK(!options_.label_column.empty(),
                       "reading '{}' for classification needs a label column", path_);
        for (const auto& [raw, name] : options_.label_map) {
            label_map_.emplace(raw, name);
            map_keys_ += (map_keys_.empty() ? "" : ", ") + raw;
        }
    }

    bool next(Record& out) override {
        while (true) {
            if (!source_) {
                if (index_ >= files_.size()) {
                    if (report_.records == 0) fail_empty();
                    return false;
                }
                source_ = open_file(index_);
            }
            if (source_->next(out)) {
                apply_label_map(out);
                ++report_.records;
                return true;
            }
            source_.reset();
            ++index_;
        }
    }

    const ReadReport& report() const override { return report_; }
    const std::vector<std::string>& files() const override { return files_; }

private:
    std::unique_ptr<FileSource> open_file(size_t i) {
        FileCtx ctx{files_[i], static_cast<int32_t>(i), &options_, &report_};
        switch (*format_of(files_[i])) {
            case Format::jsonl:
                return data_detail::open_jsonl_file(ctx);
            case Format::json:
                return json_file_is_lines(files_[i]) ? data_detail::open_jsonl_file(ctx)
                                                     : data_detail::open_json_document(ctx);
            case Format::csv:
                return data_detail::open_csv_file(ctx, ',');
            case Format::tsv:
                return data_detail::open_csv_file(ctx, '\t');
            case Format::text:
                ++report_.text_files;
                return data_detail::open_text_file(ctx);
        }
        LOOM_FAIL("data file '{}': unknown format", files_[i]);
    }

    void apply_label_map(Record& r) const {
        if (label_map_.empty() || r.label.kind == Label::Kind::none) return;
        auto it = label_map_.find(r.label.name);
        if (it == label_map_.end())
            LOOM_FAIL("{}: label '{}' is not in label_map (keys: {})", origin(r), r.label.name,
                      map_keys_);
        r.label.kind = Label::Kind::text;
        r.label.name = it->second;
        r.label.id = 0;
    }

    [[noreturn]] void fail_empty() const {
        std::string where = files_.size() == 1 && files_[0] == path_
                                ? fmt::format("'{}'", path_)
                                : fmt::format("folder '{}' ({} files)", path_, files_.size());
        std::string why;
        if (report_.bad_lines > 0)
            why = fmt::format(": all {} lines were bad and skipped, e.g. {}", report_.bad_lines,
                              report_.bad_examples.front());
        else if (options_.kind == RecordKind::text)
            why = " (blank lines are not records)";
        LOOM_FAIL("empty dataset: no records in {}{}", where, why);
    }

    std::string path_;
    ReadOptions options_;
    std::vector<std::string> files_;
    std::unordered_map<std::string, std::string> label_map_;
    std::string map_keys_;
    ReadReport report_;
    std::unique_ptr<FileSource> source_;
    size_t index_ = 0;
};

}  // namespace

std::unique_ptr<RecordReader> open_records(const std::string& path, const ReadOptions& options) {
    return std::make_unique<MultiFileReader>(path, options);
}

std::vector<Record> read_records(const std::string& path, const ReadOptions& options,
                                 ReadReport* report) {
    auto reader = open_records(path, options);
    std::vector<Record> out;
    Record r;
    while (reader->next(r)) out.push_back(r);
    if (report) *report = reader->report();
    return out;
}

}  // namespace loom
