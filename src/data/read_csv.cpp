// CSV and TSV (RFC 4180): a header row names the columns; fields are
// separated by ',' (.csv) or a tab (.tsv); a field that starts with '"' is
// quoted, may contain the delimiter, newlines and "" for a quote, and must be
// followed by a delimiter or the end of the record. A quote inside an
// unquoted field is kept literally (as Python's csv module does), which keeps
// GLUE-style TSVs with stray quotes readable.
//
// Streamed: a record is parsed from one line, pulling further lines only
// while a quoted field is open. Records with the wrong number of fields or
// broken quoting are bad lines; blank lines are skipped. Integer-looking
// labels ("0", "4") are integer labels, as HF datasets infers them. QA
// records (question, context, optional id) only when answers are not
// required: a cell cannot hold a list of answer spans.
#include <algorithm>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {

namespace {

class CsvSource : public FileSource {
public:
    CsvSource(const FileCtx& ctx, char delimiter)
        : ctx_(ctx), delim_(delimiter), lines_(ctx.path) {
        const ReadOptions& o = *ctx.options;
        LOOM_CHECK(o.kind != RecordKind::qa || !o.require_answers,
                   "{}: question-answering data must be JSONL or SQuAD JSON (answers are lists "
                   "of spans, which a CSV cell cannot hold)",
                   ctx.path);
        int64_t header_line = 0;
        if (!read_record(header_, header_line)) {
            // An empty file has no records; the caller reports an empty dataset.
            empty_ = true;
            return;
        }
        for (size_t i = 0; i < header_.size(); ++i)
            for (size_t j = 0; j < i; ++j)
                LOOM_CHECK(header_[i] != header_[j], "{}:{}: duplicate column '{}' in the header",
                           ctx.path, header_line, header_[i]);
        auto index_of = [&](const std::string& name) -> int64_t {
            auto it = std::find(header_.begin(), header_.end(), name);
            if (it == header_.end()) missing_column(ctx, header_line, name, header_);
            return it - header_.begin();
        };
        if (o.kind == RecordKind::qa) {
            // Questions to answer, without answers (require_answers is off).
            question_ = index_of(o.question_column);
            context_ = index_of(o.context_column);
            auto id = std::find(header_.begin(), header_.end(), o.id_column);
            if (id != header_.end()) id_ = id - header_.begin();
            return;
        }
        text_ = index_of(o.text_column);
        if (o.kind == RecordKind::classification) {
            label_ = index_of(o.label_column);
            if (!o.text_pair_column.empty()) pair_ = index_of(o.text_pair_column);
        }
        if (o.kind == RecordKind::prompt_completion) pair_ = index_of(o.text_pair_column);
    }

    bool next(Record& out) override {
        if (empty_) return false;
        int64_t start = 0;
        while (read_record(fields_, start)) {
            if (fields_.size() != header_.size()) {
                bad_line(ctx_, start, fmt::format("expected {} fields as in the header, got {}",
                                                  header_.size(), fields_.size()));
                continue;
            }
            if (question_ >= 0) {
                out.question = fields_[question_];
                out.context = fields_[context_];
                out.id = id_ >= 0 ? fields_[id_] : std::string();
            } else {
                out.text = fields_[text_];
            }
            out.has_pair = pair_ >= 0;
            if (pair_ >= 0) out.text_pair = fields_[pair_];
            out.label = label_ >= 0 ? label_from_text(fields_[label_]) : Label{};
            out.answers.clear();
            out.is_impossible = false;
            out.line = start;
            out.file_index = ctx_.file_index;
            out.index = index_++;
            return true;
        }
        return false;
    }

private:
    // Reads the next non-blank record into `fields`; false at EOF. A
    // malformed record is reported through bad_line and skipped.
    bool read_record(std::vector<std::string>& fields, int64_t& start_line) {
        std::string_view line;
        while (lines_.next(line)) {
            if (line.empty()) continue;
            start_line = lines_.line_number();
            std::string error;
            if (parse(line, fields, error)) return true;
            bad_line(ctx_, start_line, error);
        }
        return false;
    }

    // Parses one record starting with `line`, pulling continuation lines
    // while a quoted field is open.
    bool parse(std::string_view line, std::vector<std::string>& fields, std::string& error) {
        fields.clear();
        size_t i = 0;
        while (true) {
            std::string field;
            if (i < line.size() && line[i] == '"') {
                ++i;
                while (true) {
                    size_t q = line.find('"', i);
                    if (q == std::string_view::npos) {
                        // The quoted field goes on past the end of this line.
                        field.append(line.substr(i));
                        field.push_back('\n');
                        if (!lines_.next(line)) {
                            error = "unterminated quoted field (no closing '\"' before the end "
                                    "of the file)";
                            return false;
                        }
                        i = 0;
                        continue;
                    }
                    field.append(line.substr(i, q - i));
                    if (q + 1 < line.size() && line[q + 1] == '"') {
                        field.push_back('"');
                        i = q + 2;
                        continue;
                    }
                    i = q + 1;
                    break;
                }
                if (i < line.size() && line[i] != delim_) {
                    error = fmt::format("unexpected '{}' after the closing quote of field {} "
                                        "(a quote inside a quoted field is written \"\")",
                                        line[i], fields.size() + 1);
                    return false;
                }
            } else {
                size_t d = line.find(delim_, i);
                size_t stop = d == std::string_view::npos ? line.size() : d;
                field.assign(line.substr(i, stop - i));
                i = stop;
            }
            fields.push_back(std::move(field));
            if (i >= line.size()) return true;
            ++i;  // past the delimiter; a trailing delimiter ends with an empty field
            if (i == line.size()) {
                fields.emplace_back();
                return true;
            }
        }
    }

    FileCtx ctx_;
    char delim_;
    LineReader lines_;
    std::vector<std::string> header_, fields_;
    int64_t text_ = -1, label_ = -1, pair_ = -1;
    int64_t question_ = -1, context_ = -1, id_ = -1;  // QA without answers
    int64_t index_ = 0;
    bool empty_ = false;
};

}  // namespace

std::unique_ptr<FileSource> open_csv_file(const FileCtx& ctx, char delimiter) {
    return std::make_unique<CsvSource>(ctx, delimiter);
}

}  // namespace loom::data_detail
