// Plain text for language modelling, streamed, as HF datasets' `text`
// builder splits it (sample_by):
//   line       one record per line; blank (whitespace-only) lines are skipped,
//              as run_mlm's line_by_line does
//   paragraph  lines up to a blank line, joined with "\n"
//   document   the whole file, lines joined with "\n"
// Plain text has no labels, so only the `text` record kind reads it.
#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {

namespace {

bool blank(std::string_view s) {
    return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

class TextSource : public FileSource {
public:
    explicit TextSource(const FileCtx& ctx) : ctx_(ctx), lines_(ctx.path) {
        LOOM_CHECK(ctx.options->kind == RecordKind::text,
                   "{}: plain-text files hold no labels, answers or prompt/completion pairs; use "
                   "JSONL or CSV/TSV for sequence-classification and instruction data, and JSONL "
                   "or SQuAD JSON for question-answering",
                   ctx.path);
    }

    bool next(Record& out) override {
        out.text.clear();
        int64_t start = 0;
        std::string_view line;
        switch (ctx_.options->sample_by) {
            case SampleBy::line:
                while (lines_.next(line)) {
                    if (blank(line)) continue;
                    out.text.assign(line);
                    start = lines_.line_number();
                    break;
                }
                break;
            case SampleBy::paragraph:
                while (lines_.next(line)) {
                    if (blank(line)) {
                        if (start > 0) break;
                        continue;
                    }
                    if (start == 0) start = lines_.line_number();
                    else out.text.push_back('\n');
                    out.text.append(line);
                }
                break;
            case SampleBy::document: {
                bool any = false;
                while (lines_.next(line)) {
                    if (start == 0) start = lines_.line_number();
                    if (any) out.text.push_back('\n');
                    out.text.append(line);
                    any = true;
                }
                if (blank(out.text)) start = 0;
                break;
            }
        }
        if (start == 0) return false;
        out.has_pair = false;
        out.label = Label{};
        out.line = start;
        out.file_index = ctx_.file_index;
        out.index = index_++;
        return true;
    }

private:
    FileCtx ctx_;
    LineReader lines_;
    int64_t index_ = 0;
};

}  // namespace

std::unique_ptr<FileSource> open_text_file(const FileCtx& ctx) {
    return std::make_unique<TextSource>(ctx);
}

}  // namespace loom::data_detail
