// safetensors reader: mapping, header validation, and tensor views.
//
// Everything a file claims is checked before a SafetensorsFile exists, with
// arithmetic that cannot overflow, so a truncated or hostile file yields one
// loom::Error ("<path>: tensor '<name>': <what was expected>, found <what>")
// and never an out-of-bounds read. The checks follow the reference Rust
// implementation, except that gaps between tensors are allowed (only overlap
// is an error) and an unknown field in an entry is ignored, as Rust does.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "core/check.h"

namespace loom {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps");

namespace {

using json = nlohmann::json;

// The reference implementation's cap; a larger N is not a safetensors file.
constexpr uint64_t k_max_header_bytes = 100'000'000;

// safetensors dtypes Loom has no DType for: a file using them is valid, just
// not loadable here, and the message should say so rather than "unknown".
constexpr const char* k_foreign_dtypes[] = {"BOOL",    "I8",      "U16",     "I16",     "U32",
                                            "U64",     "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",
                                            "F6_E2M3", "F6_E3M2", "C64"};

// A JSON value for an error message, cut short so a hostile header cannot
// produce a megabyte-long message. NOTE: json::dump recurses once per nesting
// level, so a header nested a million levels deep would overflow the stack;
// this walk stops at a small depth instead.
void brief_into(const json& v, std::string& out, int depth) {
    constexpr size_t k_budget = 80;
    if (out.size() > k_budget) return;
    if (v.is_structured()) {
        const bool array = v.is_array();
        if (depth >= 4) {
            out += array ? "[...]" : "{...}";
            return;
        }
        out += array ? '[' : '{';
        bool first = true;
        for (auto it = v.begin(); it != v.end(); ++it) {
            if (out.size() > k_budget) break;
            if (!first) out += ',';
            first = false;
            if (!array) {
                brief_into(json(it.key()), out, depth + 1);
                out += ':';
            }
            brief_into(*it, out, depth + 1);
        }
        out += array ? ']' : '}';
        return;
    }
    if (v.is_string() && v.get_ref<const std::string&>().size() > k_budget) {
        out += json(v.get_ref<const std::string&>().substr(0, k_budget))
                   .dump(-1, ' ', true, json::error_handler_t::replace);
        return;
    }
    out += v.dump(-1, ' ', true, json::error_handler_t::replace);
}

std::string brief(const json& v) {
    std::string s;
    brief_into(v, s, 0);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

std::string supported_dtypes() {
    std::string s;
    for (DType t :
         {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::u8}) {
        if (!s.empty()) s += ", ";
        s += dtype_safetensors_name(t);
    }
    return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

// Reads the fields of one header entry; `where` is "<path>: tensor '<name>'".
struct EntryParser {
    const std::string& where;
    size_t data_bytes;

    DType dtype(const json& e) const {
        auto it = e.find("dtype");
        LOOM_CHECK(it != e.end(), "{}: missing \"dtype\" (expected one of {})", where,
                   supported_dtypes());
        LOOM_CHECK(it->is_string(), "{}: \"dtype\" must be a string such as \"F32\", found {}",
                   where, brief(*it));
        const std::string& s = it->get_ref<const std::string&>();
        if (auto t = dtype_from_safetensors_name(s)) return *t;
        for (const char* f : k_foreign_dtypes)
            LOOM_CHECK(s != f,
                       "{}: dtype \"{}\" is valid safetensors but Loom cannot load it "
                       "(supported: {})",
                       where, s, supported_dtypes());
        LOOM_FAIL("{}: unknown dtype {} (expected one of {})", where, brief(*it),
                  supported_dtypes());
    }

    Shape shape(const json& e) const {
        auto it = e.find("shape");
        LOOM_CHECK(it != e.end(),
                   "{}: missing \"shape\" (expected an array of dimensions, "
                   "[] for a scalar)",
                   where);
        LOOM_CHECK(it->is_array(),
                   "{}: \"shape\" must be an array of non-negative integers, "
                   "found {}",
                   where, brief(*it));
        LOOM_CHECK(it->size() <= size_t(Shape::k_max_dims),
                   "{}: shape {} has {} dimensions, Loom supports at most {}", where, brief(*it),
                   it->size(), Shape::k_max_dims);
        Shape s;
        int64_t nonzero_product = 1;
        for (const json& d : *it) {
            LOOM_CHECK(d.is_number_unsigned(),
                       "{}: shape {} must hold non-negative integers, found {}", where, brief(*it),
                       brief(d));
            uint64_t v = d.get<uint64_t>();
            LOOM_CHECK(v <= uint64_t(std::numeric_limits<int64_t>::max()),
                       "{}: dimension {} in shape {} is too large", where, v, brief(*it));
            // Every prefix product Shape::numel forms must fit in int64, also
            // when a later dimension is 0, so check the product of the nonzero
            // dimensions, not only the final count.
            if (v != 0)
                LOOM_CHECK(!__builtin_mul_overflow(nonzero_product, int64_t(v), &nonzero_product),
                           "{}: shape {} has more elements than fit in 64 bits", where, brief(*it));
            s.push(int64_t(v));
        }
        return s;
    }

    std::pair<uint64_t, uint64_t> offsets(const json& e) const {
        auto it = e.find("data_offsets");
        LOOM_CHECK(it != e.end(),
                   "{}: missing \"data_offsets\" (expected [begin, end], byte "
                   "offsets into the data after the header)",
                   where);
        LOOM_CHECK(it->is_array() && it->size() == 2 && (*it)[0].is_number_unsigned() &&
                       (*it)[1].is_number_unsigned(),
                   "{}: \"data_offsets\" must be [begin, end], two non-negative integers, found {}",
                   where, brief(*it));
        uint64_t begin = (*it)[0].get<uint64_t>(), end = (*it)[1].get<uint64_t>();
        LOOM_CHECK(begin <= end, "{}: data_offsets [{}, {}] end before begin", where, begin, end);
        LOOM_CHECK(end <= data_bytes,
                   "{}: data_offsets [{}, {}] run past the end of the data: the file holds {} "
                   "bytes of tensor data (truncated file?)",
                   where, begin, end, data_bytes);
        return {begin, end};
    }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    if (path.ends_with(".index.json")) return open_index(path);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOOM_CHECK(fd >= 0, "cannot open safetensors file '{}': {}", path,
               std::generic_category().message(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        LOOM_FAIL("{}: cannot stat: {}", path, std::generic_category().message(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        LOOM_FAIL("{}: {}, expected a .safetensors file", path,
                  S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
    }
    const size_t size = size_t(st.st_size);
    if (size < 8) {
        ::close(fd);
        LOOM_FAIL(
            "{}: file is {} bytes, too short for a safetensors file (it starts with an "
            "8-byte header length)",
            path, size);
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file open
    LOOM_CHECK(p != MAP_FAILED, "{}: cannot map {} bytes: {}", path, size,
               std::generic_category().message(err));
    auto mapping = Storage::wrap(p, size, [p, size] { ::munmap(p, size); });
    return from_bytes(std::move(mapping), path);
}

SafetensorsFile SafetensorsFile::from_bytes(std::shared_ptr<Storage> bytes,
                                            const std::string& label) {
    LOOM_CHECK(bytes != nullptr, "{}: no data", label);
    const auto* base = static_cast<const unsigned char*>(bytes->data());
    const size_t size = bytes->nbytes();
    LOOM_CHECK(size >= 8,
               "{}: file is {} bytes, too short for a safetensors file (it starts "
               "with an 8-byte header length)",
               label, size);

    uint64_t n = 0;
    std::memcpy(&n, base, 8);
    if (n > size - 8) {
        // A zip (PyTorch's .bin) or random bytes give an absurd N: say so.
        std::string hint = std::memcmp(base, "PK\x03\x04", 4) == 0
                               ? " (this is a zip archive, e.g. a PyTorch .bin, not safetensors)"
                           : n > k_max_header_bytes ? " (not a safetensors file?)"
                                                    : " (truncated file?)";
        LOOM_FAIL(
            "{}: header length {} bytes runs past the end of the file ({} bytes, so at "
            "most {} header bytes){}",
            label, n, size, size - 8, hint);
    }
    LOOM_CHECK(n <= k_max_header_bytes,
               "{}: header length {} bytes exceeds the {} byte limit "
               "(not a safetensors file?)",
               label, n, k_max_header_bytes);

    // NOTE: nlohmann's lexer takes a NUL byte as the end of input, so
    // "{...}\0<anything>" would parse; the format pads with spaces only.
    const char* h = reinterpret_cast<const char*>(base + 8);
    if (const void* nul = std::memchr(h, 0, size_t(n)))
        LOOM_FAIL(
            "{}: header is not valid JSON: NUL byte at header offset {} (padding must be "
            "spaces)",
            label, static_cast<const char*>(nul) - h);

    // Parse, remembering duplicate top-level keys: nlohmann keeps only the last
    // value, which would silently hide a tensor.
    std::set<std::string> seen;
    std::string duplicate;
    json header;
    try {
        json::parser_callback_t on_event = [&](int depth, json::parse_event_t ev, json& v) {
            if (depth == 1 && ev == json::parse_event_t::key && v.is_string()) {
                const auto& k = v.get_ref<const std::string&>();
                if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
            }
            return true;
        };
        header = json::parse(h, h + n, on_event);
    } catch (const json::exception& e) {
        std::string why = e.what();
        if (auto close = why.find("] "); why.rfind("[json.exception", 0) == 0 && close != why.npos)
            why = why.substr(close + 2);
        LOOM_FAIL("{}: header ({} bytes after the 8-byte length) is not valid JSON: {}", label, n,
                  why);
    }
    LOOM_CHECK(header.is_object(),
               "{}: header is a JSON {}, expected an object mapping tensor "
               "names to {{\"dtype\", \"shape\", \"data_offsets\"}}",
               label, header.type_name());
    LOOM_CHECK(duplicate.empty(), "{}: tensor '{}' appears twice in the header", label, duplicate);

    SafetensorsFile f;
    f.path_ = label;
    f.mapping_ = std::move(bytes);
    f.data_start_ = 8 + size_t(n);
    const size_t data_bytes = size - f.data_start_;

    struct Range {
        uint64_t begin, end;
        const std::string* name;
    };
    std::vector<Range> ranges;
    for (const auto& [name, e] : header.items()) {
        if (name == "__metadata__") {
            LOOM_CHECK(e.is_object(), "{}: __metadata__ must be an object of strings, found {}",
                       label, brief(e));
            for (const auto& [k, v] : e.items()) {
                LOOM_CHECK(v.is_string(),
                           "{}: __metadata__ key '{}' must map to a string, "
                           "found {}",
                           label, k, brief(v));
                f.metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        const std::string where = fmt::format("{}: tensor '{}'", label, name);
        LOOM_CHECK(e.is_object(),
                   "{}: expected {{\"dtype\", \"shape\", \"data_offsets\"}}, "
                   "found {}",
                   where, brief(e));
        EntryParser p{where, data_bytes};
        Entry entry{p.dtype(e), p.shape(e), 0, 0};
        auto [begin, end] = p.offsets(e);
        // numel fits in int64 (checked in shape); the byte count may still not.
        uint64_t need = 0;
        bool overflow = __builtin_mul_overflow(uint64_t(entry.shape.numel()),
                                               uint64_t(dtype_size(entry.dtype)), &need);
        LOOM_CHECK(!overflow && need == end - begin,
                   "{}: data_offsets [{}, {}] is {} bytes but {} {} needs {} ({} elements x {} "
                   "bytes)",
                   where, begin, end, end - begin, dtype_safetensors_name(entry.dtype),
                   entry.shape.to_string(),
                   overflow ? std::string("more than 2^64") : std::to_string(need),
                   entry.shape.numel(), dtype_size(entry.dtype));
        entry.begin = size_t(begin);
        entry.end = size_t(end);
        auto [it, inserted] = f.entries_.emplace(name, entry);
        (void)inserted;
        ranges.push_back({begin, end, &it->first});
    }

    // Sorted by begin (then name, for a stable file order), a range overlaps an
    // earlier one exactly when it starts before the largest end seen so far.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : *a.name < *b.name;
    });
    const Range* furthest = nullptr;
    for (const Range& r : ranges) {
        if (r.begin == r.end) continue;  // empty tensors own no bytes
        if (furthest && r.begin < furthest->end)
            LOOM_FAIL(
                "{}: tensors '{}' data_offsets [{}, {}] and '{}' data_offsets [{}, {}] "
                "overlap; each tensor needs its own bytes",
                label, *furthest->name, furthest->begin, furthest->end, *r.name, r.begin, r.end);
        if (!furthest || r.end > furthest->end) furthest = &r;
    }
    f.names_.reserve(ranges.size());
    for (const Range& r : ranges) f.names_.push_back(*r.name);
    return f;
}

bool SafetensorsFile::contains(const std::string& name) const {
    return entries_.count(name) != 0;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it != entries_.end()) return it->second;
    std::string closest;
    size_t best = std::numeric_limits<size_t>::max();
    if (entries_.size() <= 100000) {
        for (const auto& [other, e] : entries_) {
            size_t d = edit_distance(name, other);
            if (d < best) best = d, closest = other;
        }
    }
    std::string hint = closest.empty() || best > std::max<size_t>(3, name.size() / 3)
                           ? ""
                           : fmt::format("; did you mean '{}'?", closest);
    LOOM_FAIL("{}: no tensor named '{}' (the file holds {} tensors{})", path_, name,
              entries_.size(), hint);
}

DType SafetensorsFile::dtype(const std::string& name) const {
    return entry(name).dtype;
}

const Shape& SafetensorsFile::shape(const std::string& name) const {
    return entry(name).shape;
}

size_t SafetensorsFile::data_bytes() const {
    size_t n = 0;
    for (const Shard& s : shards_) n += s.mapping->nbytes() - s.data_start;
    return mapping_ ? mapping_->nbytes() - data_start_ : n;
}

Tensor SafetensorsFile::get(const std::string& name) const {
    const Entry& e = entry(name);
    const std::shared_ptr<Storage>& mapping = shards_.empty() ? mapping_ : shards_[e.part].mapping;
    const size_t offset = (shards_.empty() ? data_start_ : shards_[e.part].data_start) + e.begin;
    const auto address = reinterpret_cast<uintptr_t>(mapping->data()) + offset;
    if (address % dtype_size(e.dtype) == 0)
        return Tensor::view_of(mapping, offset, e.dtype, e.shape, name);
    // NOTE: legal but unaligned data (a header length that is not a multiple of
    // 8, or odd offsets) is copied: typed loads from it would be undefined.
    Tensor t = Tensor::empty(e.dtype, e.shape, name);
    if (e.end > e.begin)
        std::memcpy(t.raw(), static_cast<const char*>(mapping->data()) + offset, e.end - e.begin);
    return t;
}

Tensor SafetensorsFile::get(const std::string& name, DType dtype, const Shape& shape) const {
    const Entry& e = entry(name);
    LOOM_CHECK(e.dtype == dtype && e.shape == shape, "{}: tensor '{}' is {} {}, expected {} {}",
               path_, name, dtype_safetensors_name(e.dtype), e.shape.to_string(),
               dtype_safetensors_name(dtype), shape.to_string());
    return get(name);
}

}  // namespace loom
