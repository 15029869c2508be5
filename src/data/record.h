// Records: what the data readers yield and the task collators consume.
//
// One record is one training example before tokenization: a text (plus an
// optional second segment and a label) for classification and language
// modelling, or a question, a context and answers for extractive QA.
//
// Sources: JSONL, CSV/TSV (RFC 4180, header row, delimiter by extension),
// plain text (by line, paragraph or document), SQuAD JSON (v1.1, v2.0), a
// JSON list of records, or a folder of such files read in sorted name order.
// JSONL, CSV and text are streamed line by line; JSON documents are parsed
// whole (they are one value).
//
// Errors name the file and line (or the record's path in a JSON document),
// the column and what was expected. A malformed line is an error unless
// skip_bad_lines is set, in which case it is counted in the ReadReport with
// the first few reasons; a missing column or a label outside label_map is
// always an error, as is a dataset with no records.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sample_by.h"

namespace loom {

// prompt_completion: instruction data for causal LM (TRL's prompt-completion
// format): the prompt in Record::text, the completion in Record::text_pair.
enum class RecordKind { text, classification, qa, prompt_completion };

struct Label {
    enum class Kind { none, integer, text };
    Kind kind = Kind::none;
    int64_t id = 0;    // integer labels
    std::string name;  // text labels; for integer labels their decimal form
    bool operator==(const Label&) const = default;
};

struct QaAnswer {
    std::string text;
    int64_t answer_start = 0;       // in characters (code points), as SQuAD counts
    int64_t answer_start_byte = 0;  // the same position in the UTF-8 context
    bool operator==(const QaAnswer&) const = default;
};

struct Record {
    std::string text;       // classification / LM input; prompt_completion: the prompt
    std::string text_pair;  // second segment (when has_pair); prompt_completion: the completion
    bool has_pair = false;
    Label label;
    // Question answering.
    std::string id;
    std::string title;
    std::string question;
    std::string context;
    std::vector<QaAnswer> answers;  // empty when is_impossible (SQuAD v2.0)
    bool is_impossible = false;
    // Where it came from: index into RecordReader::files(), and the 1-based
    // line where it starts (0 inside JSON documents, where `index` counts).
    int32_t file_index = 0;
    int64_t line = 0;
    int64_t index = 0;  // 0-based ordinal within its file
};

struct ReadOptions {
    RecordKind kind = RecordKind::text;
    std::string text_column = "text";
    std::string text_pair_column;  // empty = single segment; prompt_completion: the completion
    std::string label_column = "label";
    // Raw label (integers in decimal) -> label name; empty = labels as they are.
    std::vector<std::pair<std::string, std::string>> label_map;
    std::string question_column = "question";
    std::string context_column = "context";
    std::string answers_column = "answers";
    // false: QA records may omit the answers (prediction inputs, as HF's
    // pipeline takes them); such a record has no answers and is not marked
    // impossible. CSV/TSV then also hold QA records (question and context).
    bool require_answers = true;
    std::string id_column = "id";
    SampleBy sample_by = SampleBy::line;
    bool skip_bad_lines = false;
};

struct ReadReport {
    int64_t records = 0;
    int64_t text_files = 0;  // plain-text files opened (split by sample_by)
    int64_t bad_lines = 0;
    std::vector<std::string> bad_examples;  // the first few "file:line: reason"
    static constexpr size_t k_max_examples = 10;
};

class RecordReader {
public:
    virtual ~RecordReader() = default;
    // The next record into `out` (reusing its buffers); false at the end.
    // Throws loom::Error on bad input, and at the end if there were no records.
    virtual bool next(Record& out) = 0;
    virtual const ReadReport& report() const = 0;
    // The files read, in order (one for a file, the sorted contents of a folder).
    virtual const std::vector<std::string>& files() const = 0;
    // "file:line" or "file (record n)" for messages about a record.
    std::string origin(const Record& r) const;
};

// Opens a file or a folder of files. Format by extension: .jsonl/.ndjson,
// .json (SQuAD, a list of records, or JSON lines), .csv, .tsv, .txt/.text.
std::unique_ptr<RecordReader> open_records(const std::string& path, const ReadOptions& options);

// Reads everything (convenience for small sets and tests).
std::vector<Record> read_records(const std::string& path, const ReadOptions& options,
                                 ReadReport* report = nullptr);

}  // namespace loom
