// Shared pieces of the record readers (read_*.cpp), not a public API.
//
// LineReader streams a file in 1 MiB blocks and hands out lines as views
// into its buffer (valid until the next call), so JSONL/CSV/text readers
// never hold more than one block plus one line in memory. Files named *.gz or
// *.zst are decompressed on the way (data/input_stream.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/input_stream.h"
#include "data/record.h"

namespace loom::data_detail {

// Objects keep their keys in file order, so messages list columns as written.
using json = nlohmann::ordered_json;

class LineReader {
public:
    explicit LineReader(const std::string& path);
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    // The next line without its terminator ("\n" or "\r\n"); false at EOF.
    // A UTF-8 byte-order mark at the start of the file is dropped.
    bool next(std::string_view& line);
    int64_t line_number() const { return line_no_; }  // of the last line returned
    // Bytes of the file on disk consumed so far (compressed bytes when compressed).
    uint64_t raw_bytes_read() const { return in_->raw_bytes_read(); }

private:
    bool refill();
    std::unique_ptr<InputStream> in_;
    std::string path_;
    std::vector<char> buf_;
    size_t begin_ = 0, end_ = 0;  // unread bytes are buf_[begin_, end_)
    bool eof_ = false;
    bool first_ = true;
    int64_t line_no_ = 0;
};

// One top-level value pulled out of a JSON line by JsonLineScanner.
struct JsonColumn {
    enum class Type { missing, string, integer, number, boolean, null, object, array };
    Type type = Type::missing;
    std::string str;      // decoded string, or the text of a number / literal
    int64_t integer = 0;  // when type == integer (fits int64)
    const char* type_name() const;  // JSON's name: "string", "number", "object", ...
};

// Validates one JSON text and decodes only the wanted top-level keys of an
// object (last one wins on duplicates). Several times faster than building a
// DOM; accepts exactly what nlohmann::json::accept accepts (tested).
class JsonLineScanner {
public:
    explicit JsonLineScanner(std::vector<std::string> wanted);
    // False when `line` is not valid JSON; error() says where and why.
    bool scan(std::string_view line);
    JsonColumn::Type top_type() const { return top_type_; }
    const JsonColumn& column(size_t i) const { return columns_[i]; }
    const std::string& error() const { return error_; }

private:
    bool value(int depth, JsonColumn* out, JsonColumn::Type* type);
    bool object(int depth);
    bool array(int depth);
    bool string(std::string* out);
    bool escape(std::string* out);
    bool utf8(std::string* out);
    bool number(JsonColumn* out, JsonColumn::Type* type);
    bool literal(std::string_view word, JsonColumn* out);
    void skip_ws();
    bool fail(const char* what);

    std::vector<std::string> wanted_;
    std::vector<JsonColumn> columns_;
    std::string key_;
    std::string_view s_;
    size_t pos_ = 0;
    JsonColumn::Type top_type_ = JsonColumn::Type::missing;
    std::string error_;
};

// What every per-file reader needs: where it reads, what to extract, where
// to count skipped lines.
struct FileCtx {
    std::string path;
    int32_t file_index = 0;
    const ReadOptions* options = nullptr;
    ReadReport* report = nullptr;
};

// A malformed line: an error, or counted and skipped with skip_bad_lines.
// Returns normally only when skipping.
void bad_line(const FileCtx& ctx, int64_t line, const std::string& reason);

// Missing column: always an error, listing the columns that are there.
[[noreturn]] void missing_column(const FileCtx& ctx, int64_t line, std::string_view column,
                                 const std::vector<std::string>& present);

// Integers in decimal ("-3", "12") become integer labels, anything else text.
Label label_from_text(std::string_view s);

// One file's records, in order.
class FileSource {
public:
    virtual ~FileSource() = default;
    virtual bool next(Record& out) = 0;
};

std::unique_ptr<FileSource> open_jsonl_file(const FileCtx& ctx);
std::unique_ptr<FileSource> open_csv_file(const FileCtx& ctx, char delimiter);
std::unique_ptr<FileSource> open_text_file(const FileCtx& ctx);
// A whole JSON document: SQuAD ({"data": [{"paragraphs": ...}]}), a list of
// records, or {"data": [records]}.
std::unique_ptr<FileSource> open_json_document(const FileCtx& ctx);

// Fills the fields of `out` a JSON object provides for the task; shared by
// JSONL lines and records inside JSON documents. Returns false when the
// object is bad and was skipped. `line` is 0 inside documents (then `where`
// names the record).
bool record_from_json(const FileCtx& ctx, const json& obj, int64_t line,
                      const std::string& where, Record& out);

// SQuAD answers -> QaAnswer with byte offsets; returns an error reason
// instead of throwing so callers decide between bad_line and failing.
std::string fill_answers(const json& answers, const std::string& context,
                         std::vector<QaAnswer>& out);

}  // namespace loom::data_detail
