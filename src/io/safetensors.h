// safetensors files: read (memory-mapped, validated) and write (atomic).
//
// Format: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
// {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ...}, then the data, offsets counted from the
// first byte after the header. The reader checks everything before any tensor
// is touched: header length within the file, valid JSON, known dtypes, byte
// counts equal to dtype size x shape, offsets inside the data area and not
// overlapping. Every error names the file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

class SafetensorsFile {
public:
    // Maps the file read-only and validates the header; throws loom::Error.
    static SafetensorsFile open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Tensor names in file order.
    const std::vector<std::string>& names() const { return names_; }
    bool contains(const std::string& name) const;
    // A zero-copy view into the mapping; the mapping lives as long as any view.
    // Missing names throw an error that names the file and the tensor.
    Tensor get(const std::string& name) const;
    // Like get, and checks dtype and shape, naming both on mismatch.
    Tensor get(const std::string& name, DType dtype, const Shape& shape) const;

private:
    std::string path_;
    std::shared_ptr<Storage> mapping_;
    size_t data_start_ = 0;
    struct Entry {
        DType dtype;
        Shape shape;
        size_t begin, end;
    };
    std::map<std::string, Entry> entries_;
    std::vector<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

// Writes tensors (CPU, any dtype) under their map keys, sorted by name as
// torch's safetensors does, through a temporary file renamed into place.
void safetensors_write(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
