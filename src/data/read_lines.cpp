// Streaming line reader and the error helpers shared by every record reader.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {

namespace {
constexpr size_t k_block_bytes = size_t{1} << 20;
}

LineReader::LineReader(const std::string& path) : in_(open_input_stream(path)), path_(path) {
    buf_.resize(k_block_bytes);
}

LineReader::~LineReader() = default;

bool LineReader::refill() {
    // Keep the unread tail at the front; grow only when a single line fills
    // the whole buffer.
    if (begin_ > 0) {
        std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
    }
    if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
    size_t n = in_->read(buf_.data() + end_, buf_.size() - end_);
    if (n == 0) {
        eof_ = true;
        return false;
    }
    end_ += n;
    return true;
}

bool LineReader::next(std::string_view& line) {
    size_t scanned = 0;  // bytes after begin_ already known to hold no '\n'
    while (true) {
        const char* start = buf_.data() + begin_;
        const size_t avail = end_ - begin_;
        const void* nl = std::memchr(start + scanned, '\n', avail - scanned);
        size_t len;
        if (nl) {
            len = static_cast<size_t>(static_cast<const char*>(nl) - start);
            begin_ += len + 1;
        } else if (eof_) {
            if (avail == 0) return false;
            len = avail;
            begin_ = end_;
        } else {
            scanned = avail;
            refill();
            continue;
        }
        line = std::string_view(start, len);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (first_) {
            first_ = false;
            if (line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);
        }
        ++line_no_;
        return true;
    }
}

void bad_line(const FileCtx& ctx, int64_t line, const std::string& reason) {
    std::string msg = line > 0 ? fmt::format("{}:{}: {}", ctx.path, line, reason)
                               : fmt::format("{}: {}", ctx.path, reason);
    if (!ctx.options->skip_bad_lines)
        LOOM_FAIL("{} (set data.skip_bad_lines: true to skip such lines)", msg);
    ++ctx.report->bad_lines;
    if (ctx.report->bad_examples.size() < ReadReport::k_max_examples)
        ctx.report->bad_examples.push_back(std::move(msg));
}

void missing_column(const FileCtx& ctx, int64_t line, std::string_view column,
                    const std::vector<std::string>& present) {
    std::string list;
    for (const auto& c : present) list += (list.empty() ? "" : ", ") + c;
    if (list.empty()) list = "(none)";
    std::string at = line > 0 ? fmt::format("{}:{}", ctx.path, line) : ctx.path;
    // Chat records would need the model's chat template, a Jinja program,
    // which Loom does not render.
    const bool chat = std::find(present.begin(), present.end(), "messages") != present.end();
    LOOM_FAIL("{}: column '{}' not found; columns present: {}{}", at, column, list,
              chat ? " (chat 'messages' are not read: rendering them needs the model's Jinja chat "
                     "template; render them to a text column, or to prompt and completion "
                     "columns, first)"
                   : "");
}

Label label_from_text(std::string_view s) {
    Label l;
    l.name = std::string(s);
    size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    bool digits = s.size() > i && s.size() - i <= 18;
    for (size_t k = i; digits && k < s.size(); ++k) digits = s[k] >= '0' && s[k] <= '9';
    if (digits) {
        l.kind = Label::Kind::integer;
        l.id = std::stoll(std::string(s));
        l.name = std::to_string(l.id);  // "+3" and "03" read as 3, as int() does
    } else {
        l.kind = Label::Kind::text;
    }
    return l;
}

}  // namespace loom::data_detail
