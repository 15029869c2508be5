// JSON Lines: one JSON object per line, streamed. Also the object -> record
// mapping shared with records inside JSON documents (read_squad.cpp).
//
// Accepted shapes per task:
//   text            {"text": "..."}
//   classification  {"text": "...", "text_pair": "...", "label": 3 | "positive"}
//   prompt_completion {"prompt": "...", "completion": "..."}  (the column names are options)
//   qa              {"id", "title", "question", "context",
//                    "answers": {"text": [..], "answer_start": [..]}}   (HF datasets)
//                   or "answers": [{"text": .., "answer_start": ..}]    (SQuAD);
//                   answers may be left out when require_answers is off
// Blank lines are skipped. A line that is not a JSON object, or whose
// columns hold the wrong type, is a bad line; a missing column is an error.
#include <fmt/ranges.h>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {


namespace {

std::vector<std::string> keys_of(const json& obj) {
    std::vector<std::string> keys;
    for (auto it = obj.begin(); it != obj.end(); ++it) keys.push_back(it.key());
    return keys;
}

const char* type_name(const json& v) { return v.type_name(); }

// Code points in a UTF-8 string: bytes that do not continue a sequence.
int64_t count_chars(std::string_view s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// Byte offset of code point `index` in UTF-8 `s`, or npos past the end.
size_t char_to_byte(std::string_view s, int64_t index) {
    int64_t seen = 0;
    for (size_t b = 0; b < s.size(); ++b) {
        if ((static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) continue;
        if (seen == index) return b;
        ++seen;
    }
    return seen == index ? s.size() : std::string_view::npos;
}

std::string answer_error(const std::string& text, int64_t start, const std::string& context) {
    if (start < 0) return fmt::format("answer_start {} is negative", start);
    size_t b = char_to_byte(context, start);
    if (b == std::string_view::npos || b + text.size() > context.size())
        return fmt::format("answer '{}' at answer_start {} runs past the end of the context "
                           "({} characters)",
                           text, start, count_chars(context));
    return "";
}

}  // namespace

std::string fill_answers(const json& answers, const std::string& context,
                         std::vector<QaAnswer>& out) {
    out.clear();
    auto add = [&](const json& t, const json& s) -> std::string {
        if (!t.is_string()) return fmt::format("answer text must be a string, got {}", type_name(t));
        if (!s.is_number_integer())
            return fmt::format("answer_start must be an integer, got {}", type_name(s));
        QaAnswer a;
        a.text = t.get<std::string>();
        a.answer_start = s.get<int64_t>();
        if (auto e = answer_error(a.text, a.answer_start, context); !e.empty()) return e;
        a.answer_start_byte = static_cast<int64_t>(char_to_byte(context, a.answer_start));
        out.push_back(std::move(a));
        return "";
    };
    if (answers.is_object()) {
        auto t = answers.find("text");
        auto s = answers.find("answer_start");
        if (t == answers.end() || s == answers.end() || !t->is_array() || !s->is_array())
            return "answers must hold lists 'text' and 'answer_start'";
        if (t->size() != s->size())
            return fmt::format("answers has {} texts but {} answer_start values", t->size(),
                               s->size());
        for (size_t i = 0; i < t->size(); ++i)
            if (auto e = add((*t)[i], (*s)[i]); !e.empty()) return e;
        return "";
    }
    if (answers.is_array()) {
        for (const auto& a : answers) {
            if (!a.is_object() || !a.contains("text") || !a.contains("answer_start"))
                return "each answer must be an object with 'text' and 'answer_start'";
            if (auto e = add(a["text"], a["answer_start"]); !e.empty()) return e;
        }
        return "";
    }
    return fmt::format("answers must be a list or {{text: [...], answer_start: [...]}}, got {}",
                       type_name(answers));
}

bool record_from_json(const FileCtx& ctx, const json& obj, int64_t line, const std::string& where,
                      Record& out) {
    const std::string at = where.empty() ? "" : where + ": ";
    if (!obj.is_object()) {
        bad_line(ctx, line, fmt::format("{}expected a JSON object, got {}", at, type_name(obj)));
        return false;
    }
    const ReadOptions& o = *ctx.options;
    auto column = [&](const std::string& name) -> const json& {
        auto it = obj.find(name);
        if (it == obj.end()) {
            if (where.empty()) missing_column(ctx, line, name, keys_of(obj));
            LOOM_FAIL("{}: {}: column '{}' not found; columns present: {}", ctx.path, where, name,
                      fmt::join(keys_of(obj), ", "));
        }
        return *it;
    };
    // Fills `dst` from a string column; a bad value is a bad line.
    auto string_column = [&](const std::string& name, std::string& dst) {
        const json& v = column(name);
        if (!v.is_string()) {
            bad_line(ctx, line, fmt::format("{}column '{}' must be a string, got {}", at, name,
                                            type_name(v)));
            return false;
        }
        dst = v.get_ref<const std::string&>();
        return true;
    };
    out.has_pair = false;
    out.label = Label{};
    out.answers.clear();
    out.is_impossible = false;
    out.line = line;
    out.file_index = ctx.file_index;
    switch (o.kind) {
        case RecordKind::text:
            return string_column(o.text_column, out.text);
        case RecordKind::prompt_completion:
            out.has_pair = true;
            return string_column(o.text_column, out.text) &&
                   string_column(o.text_pair_column, out.text_pair);
        case RecordKind::classification: {
            if (!string_column(o.text_column, out.text)) return false;
            if (!o.text_pair_column.empty()) {
                if (!string_column(o.text_pair_column, out.text_pair)) return false;
                out.has_pair = true;
            }
            const json& l = column(o.label_column);
            if (l.is_number_integer()) {
                out.label.kind = Label::Kind::integer;
                out.label.id = l.get<int64_t>();
                out.label.name = std::to_string(out.label.id);
            } else if (l.is_string()) {
                out.label.kind = Label::Kind::text;
                out.label.name = l.get_ref<const std::string&>();
            } else {
                bad_line(ctx, line, fmt::format("{}label column '{}' must be an integer or a "
                                                "string, got {} {}",
                                                at, o.label_column, type_name(l), l.dump()));
                return false;
            }
            return true;
        }
        case RecordKind::qa: {
            if (!string_column(o.question_column, out.question)) return false;
            if (!string_column(o.context_column, out.context)) return false;
            out.id.clear();
            out.title.clear();
            if (auto it = obj.find(o.id_column); it != obj.end())
                out.id = it->is_string() ? it->get<std::string>() : it->dump();
            if (auto it = obj.find("title"); it != obj.end() && it->is_string())
                out.title = it->get<std::string>();
            if (!o.require_answers && !obj.contains(o.answers_column)) return true;
            std::string err = fill_answers(column(o.answers_column), out.context, out.answers);
            if (!err.empty()) {
                bad_line(ctx, line, at + err);
                return false;
            }
            auto imp = obj.find("is_impossible");
            out.is_impossible = out.answers.empty() || (imp != obj.end() && imp->is_boolean() &&
                                                        imp->get<bool>());
            if (out.is_impossible) out.answers.clear();
            return true;
        }
    }
    return false;
}

namespace {

std::string parse_error_text(const json::parse_error& e) {
    std::string what = e.what();
    auto p = what.find("] ");
    return p == std::string::npos ? what : what.substr(p + 2);
}

class JsonlSource : public FileSource {
public:
    explicit JsonlSource(const FileCtx& ctx)
        : ctx_(ctx), lines_(ctx.path), wanted_(wanted_columns(*ctx.options)), scan_(wanted_) {}

    bool next(Record& out) override {
        std::string_view line;
        while (lines_.next(line)) {
            if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
            const int64_t ln = lines_.line_number();
            bool ok = ctx_.options->kind == RecordKind::qa ? read_dom(line, ln, out)
                                                           : read_columns(line, ln, out);
            if (ok) {
                out.index = index_++;
                return true;
            }
        }
        return false;
    }

private:
    static std::vector<std::string> wanted_columns(const ReadOptions& o) {
        std::vector<std::string> w = {o.text_column};
        if (o.kind == RecordKind::prompt_completion) w.push_back(o.text_pair_column);
        if (o.kind == RecordKind::classification) {
            w.push_back(o.label_column);
            if (!o.text_pair_column.empty()) w.push_back(o.text_pair_column);
        }
        return w;
    }

    // QA lines hold nested answers: parse them whole.
    bool read_dom(std::string_view line, int64_t ln, Record& out) {
        json obj;
        try {
            obj = json::parse(line.begin(), line.end());
        } catch (const json::parse_error& e) {
            bad_line(ctx_, ln, "malformed JSON: " + parse_error_text(e));
            return false;
        } catch (const json::exception& e) {  // out_of_range: a number past double's range
            bad_line(ctx_, ln, std::string("malformed JSON: ") + e.what());
            return false;
        }
        return record_from_json(ctx_, obj, ln, "", out);
    }

    bool read_columns(std::string_view line, int64_t ln, Record& out) {
        const ReadOptions& o = *ctx_.options;
        if (!scan_.scan(line)) {
            bad_line(ctx_, ln, "malformed JSON at " + scan_.error());
            return false;
        }
        if (scan_.top_type() != JsonColumn::Type::object) {
            JsonColumn top;
            top.type = scan_.top_type();
            bad_line(ctx_, ln, fmt::format("expected a JSON object, got {}", top.type_name()));
            return false;
        }
        for (size_t i = 0; i < wanted_.size(); ++i)
            if (scan_.column(i).type == JsonColumn::Type::missing) {
                // The error path: parse again to list the columns that are there.
                json obj = json::parse(line.begin(), line.end());
                missing_column(ctx_, ln, wanted_[i], keys_of(obj));
            }
        auto text = [&](size_t i, std::string& dst) {
            const JsonColumn& c = scan_.column(i);
            if (c.type != JsonColumn::Type::string) {
                bad_line(ctx_, ln, fmt::format("column '{}' must be a string, got {}", wanted_[i],
                                               c.type_name()));
                return false;
            }
            dst = c.str;
            return true;
        };
        out.has_pair = false;
        out.label = Label{};
        out.answers.clear();
        out.is_impossible = false;
        out.line = ln;
        out.file_index = ctx_.file_index;
        if (!text(0, out.text)) return false;
        if (o.kind == RecordKind::prompt_completion) {
            out.has_pair = true;
            return text(1, out.text_pair);
        }
        if (o.kind != RecordKind::classification) return true;
        const JsonColumn& l = scan_.column(1);
        if (l.type == JsonColumn::Type::integer) {
            out.label.kind = Label::Kind::integer;
            out.label.id = l.integer;
            out.label.name = std::to_string(l.integer);
        } else if (l.type == JsonColumn::Type::string) {
            out.label.kind = Label::Kind::text;
            out.label.name = l.str;
        } else {
            bad_line(ctx_, ln, fmt::format("label column '{}' must be an integer or a string, "
                                           "got {} {}",
                                           o.label_column, l.type_name(), l.str));
            return false;
        }
        if (wanted_.size() > 2) {
            if (!text(2, out.text_pair)) return false;
            out.has_pair = true;
        }
        return true;
    }

    FileCtx ctx_;
    LineReader lines_;
    std::vector<std::string> wanted_;
    JsonLineScanner scan_;
    int64_t index_ = 0;
};

}  // namespace

std::unique_ptr<FileSource> open_jsonl_file(const FileCtx& ctx) {
    return std::make_unique<JsonlSource>(ctx);
}

}  // namespace loom::data_detail
