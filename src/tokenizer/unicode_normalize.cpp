// NFD/NFKD/NFC/NFKC change streams (see unicode_normalize.h for the contract).
#include "tokenizer/unicode_normalize.h"

#include <utf8proc.h>

#include <algorithm>
#include <optional>

#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

struct Pending {
    int ccc;
    char32_t c;
    int change;
};

int combining_class(char32_t c) {
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

std::vector<Change> decompose(std::string_view s, bool compat) {
    std::vector<Change> out;
    out.reserve(s.size() + 8);
    std::vector<Pending> pending;
    auto flush = [&]() {
        std::stable_sort(pending.begin(), pending.end(),
                         [](const Pending& a, const Pending& b) { return a.ccc < b.ccc; });
        for (const Pending& p : pending) out.push_back({p.c, p.change});
        pending.clear();
    };
    const utf8proc_option_t opts =
        static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    utf8proc_int32_t buf[32];
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        i += len;
        int boundclass = 0;
        utf8proc_ssize_t n =
            utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32, opts, &boundclass);
        if (n <= 0 || n > 32) {
            buf[0] = static_cast<utf8proc_int32_t>(c);
            n = 1;
        }
        for (utf8proc_ssize_t k = 0; k < n; ++k) {
            const auto d = static_cast<char32_t>(buf[k]);
            const int ccc = combining_class(d);
            if (ccc == 0) flush();
            pending.push_back({ccc, d, k == 0 ? 0 : 1});
        }
    }
    flush();
    return out;
}

std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
    utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
    const utf8proc_ssize_t n = utf8proc_normalize_utf32(buf, 2, UTF8PROC_COMPOSE);
    if (n == 1) return static_cast<char32_t>(buf[0]);
    return std::nullopt;
}

// Port of the crate's Recompositions iterator, run eagerly.
std::vector<Change> recompose(const std::vector<Change>& in) {
    std::vector<Change> out;
    out.reserve(in.size());
    std::vector<Change> buffer;
    std::optional<Change> composee;
    std::optional<int> last_ccc;
    for (const Change& x : in) {
        const int ch_class = combining_class(x.c);
        if (!composee) {
            if (ch_class != 0) {
                out.push_back(x);
                continue;
            }
            composee = x;
            continue;
        }
        const Change k = *composee;
        if (!last_ccc) {
            if (auto r = compose_pair(k.c, x.c)) {
                composee = Change{*r, k.change + x.change - 1};
                continue;
            }
            if (ch_class == 0) {
                composee = x;
                out.push_back(k);
                continue;
            }
            buffer.push_back(x);
            last_ccc = ch_class;
            continue;
        }
        if (*last_ccc >= ch_class) {
            if (ch_class == 0) {  // blocked: emit composee, then what was buffered
                composee = x;
                last_ccc.reset();
                out.push_back(k);
                out.insert(out.end(), buffer.begin(), buffer.end());
                buffer.clear();
                continue;
            }
            buffer.push_back(x);
            last_ccc = ch_class;
            continue;
        }
        if (auto r = compose_pair(k.c, x.c)) {
            composee = Change{*r, k.change + x.change - 1};
            continue;
        }
        buffer.push_back(x);
        last_ccc = ch_class;
    }
    if (composee) out.push_back(*composee);
    out.insert(out.end(), buffer.begin(), buffer.end());
    return out;
}

}  // namespace

std::vector<Change> normalize_stream(std::string_view s, NormalForm form) {
    switch (form) {
        case NormalForm::NFD: return decompose(s, false);
        case NormalForm::NFKD: return decompose(s, true);
        case NormalForm::NFC: return recompose(decompose(s, false));
        case NormalForm::NFKC: return recompose(decompose(s, true));
    }
    return {};
}

}  // namespace loom::tokenizer
