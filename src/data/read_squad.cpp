// Whole JSON documents: SQuAD v1.1 / v2.0, a list of records, or
// {"data": [records]} (what HF datasets' json loader accepts with field="data").
//
// SQuAD: {"version", "data": [{"title", "paragraphs": [{"context",
//   "qas": [{"id", "question", "answers": [{"text", "answer_start"}],
//            "is_impossible": bool (v2.0)}]}]}]}
// gives one record per question. answer_start counts characters (code
// points); QaAnswer also carries the byte offset into the UTF-8 context.
// Unanswerable v2.0 questions have no answers (plausible_answers are not
// gold answers). A document is one JSON value, so it is parsed whole; the
// records are then handed out one at a time. Errors name the record's path
// in the document ("data[3].paragraphs[0].qas[2]").
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {


namespace {

bool is_squad(const json& doc) {
    if (!doc.is_object()) return false;
    auto d = doc.find("data");
    if (d == doc.end() || !d->is_array() || d->empty()) return false;
    return (*d)[0].is_object() && (*d)[0].contains("paragraphs");
}

class DocumentSource : public FileSource {
public:
    explicit DocumentSource(const FileCtx& ctx) : ctx_(ctx) {
        // Whole document, decompressed when the name says .gz / .zst.
        std::string text;
        {
            auto in = open_input_stream(ctx.path);
            std::vector<char> buf(size_t(1) << 20);
            for (size_t n; (n = in->read(buf.data(), buf.size())) > 0;) text.append(buf.data(), n);
        }
        json doc;
        try {
            doc = json::parse(text);
        } catch (const json::exception& e) {  // parse_error, or out_of_range for huge numbers
            std::string what = e.what();
            auto p = what.find("] ");
            LOOM_FAIL("{}: malformed JSON document: {}", ctx.path,
                      p == std::string::npos ? what : what.substr(p + 2));
        }
        if (is_squad(doc)) {
            LOOM_CHECK(ctx.options->kind == RecordKind::qa,
                       "{}: is a SQuAD file; it only fits the question-answering task", ctx.path);
            read_squad(doc["data"]);
        } else if (doc.is_array()) {
            read_list(doc, "");
        } else if (doc.is_object() && doc.contains("data") && doc["data"].is_array()) {
            read_list(doc["data"], "data");
        } else {
            LOOM_FAIL("{}: a .json file must be SQuAD ({{\"data\": [{{\"paragraphs\": ...}}]}}), "
                      "a list of records, or JSON lines",
                      ctx.path);
        }
    }

    bool next(Record& out) override {
        if (pos_ >= records_.size()) return false;
        out = std::move(records_[pos_]);
        out.index = static_cast<int64_t>(pos_++);
        return true;
    }

private:
    void read_list(const json& list, const std::string& prefix) {
        for (size_t i = 0; i < list.size(); ++i) {
            Record r;
            std::string where = fmt::format("{}[{}]", prefix, i);
            if (record_from_json(ctx_, list[i], 0, where, r)) records_.push_back(std::move(r));
        }
    }

    // Problems inside one question skip (or fail on) that question only.
    void read_squad(const json& data) {
        for (size_t a = 0; a < data.size(); ++a) {
            const json& article = data[a];
            const std::string apath = fmt::format("data[{}]", a);
            const json* paragraphs = child(article, "paragraphs", apath);
            if (!paragraphs) continue;
            std::string title;
            if (article.contains("title") && article["title"].is_string())
                title = article["title"].get<std::string>();
            for (size_t p = 0; p < paragraphs->size(); ++p) {
                const json& para = (*paragraphs)[p];
                const std::string ppath = fmt::format("{}.paragraphs[{}]", apath, p);
                const json* context = child(para, "context", ppath);
                const json* qas = child(para, "qas", ppath);
                if (!context || !qas) continue;
                if (!context->is_string()) {
                    bad_line(ctx_, 0, ppath + ": context must be a string");
                    continue;
                }
                for (size_t q = 0; q < qas->size(); ++q)
                    read_question((*qas)[q], fmt::format("{}.qas[{}]", ppath, q), title,
                                  context->get_ref<const std::string&>());
            }
        }
    }

    void read_question(const json& qa, const std::string& path, const std::string& title,
                       const std::string& context) {
        const json* question = child(qa, "question", path);
        if (!question) return;
        if (!question->is_string()) {
            bad_line(ctx_, 0, path + ": question must be a string");
            return;
        }
        Record r;
        r.title = title;
        r.context = context;
        r.question = question->get<std::string>();
        if (auto id = qa.find("id"); id != qa.end())
            r.id = id->is_string() ? id->get<std::string>() : id->dump();
        bool impossible = false;
        if (auto imp = qa.find("is_impossible"); imp != qa.end()) {
            if (!imp->is_boolean()) {
                bad_line(ctx_, 0, path + ": is_impossible must be true or false");
                return;
            }
            impossible = imp->get<bool>();
        }
        const bool unlabelled = !ctx_.options->require_answers && !qa.contains("answers");
        if (!impossible && !unlabelled) {
            const json* answers = child(qa, "answers", path);
            if (!answers) return;
            std::string err = fill_answers(*answers, context, r.answers);
            if (!err.empty()) {
                bad_line(ctx_, 0, path + ": " + err);
                return;
            }
        }
        r.is_impossible = impossible || (r.answers.empty() && !unlabelled);
        r.file_index = ctx_.file_index;
        records_.push_back(std::move(r));
    }

    // A required member, or a bad entry (error, or skipped and counted).
    const json* child(const json& obj, const char* key, const std::string& path) {
        if (!obj.is_object()) {
            bad_line(ctx_, 0, fmt::format("{}: expected an object, got {}", path, obj.type_name()));
            return nullptr;
        }
        auto it = obj.find(key);
        if (it == obj.end()) {
            bad_line(ctx_, 0, fmt::format("{}: missing '{}'", path, key));
            return nullptr;
        }
        if ((std::string_view(key) == "paragraphs" || std::string_view(key) == "qas") &&
            !it->is_array()) {
            bad_line(ctx_, 0, fmt::format("{}: '{}' must be a list", path, key));
            return nullptr;
        }
        return &*it;
    }

    FileCtx ctx_;
    std::vector<Record> records_;
    size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<FileSource> open_json_document(const FileCtx& ctx) {
    return std::make_unique<DocumentSource>(ctx);
}

}  // namespace loom::data_detail
