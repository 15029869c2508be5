// safetensors files: read (memory-mapped, validated) and write (atomic).
//
// Format: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
// {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ...}, then the data, offsets counted from the
// first byte after the header. The reader checks everything before any tensor
// is touched: header length within the file, valid JSON, known dtypes, byte
// counts equal to dtype size x shape, offsets inside the data area and not
// overlapping. Every error names the file and the tensor.
//
// Layout of a file this writer produces:
//   bytes [0, 8)       N, u64 little-endian
//   bytes [8, 8+N)     JSON header, "__metadata__" first, then tensors in name
//                      order, padded with spaces so N % 8 == 0 (data 8-aligned)
//   bytes [8+N, end)   tensor data, packed in header order without gaps
//
// NOTE: views returned by get() point into a read-only mapping (PROT_READ,
// MAP_PRIVATE): writing through them faults. clone() a tensor to modify it.
// A tensor whose bytes are not aligned to its element size (legal in the
// format, never produced by torch or this writer) is returned as an aligned
// copy instead of a view, so kernels never see misaligned pointers.
//
// Sharded checkpoints (model.safetensors.index.json, as save_pretrained
// writes them past max_shard_size) open as one SafetensorsFile: open() of the
// index maps every shard it names (plain file names next to the index, never
// paths), and each tensor must be in the shard the index says.
//
// Not done here: dtypes Loom has no DType for (BOOL, I8, U16, F8_*...) are
// rejected with a message rather than read.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/tensor_source.h"

namespace loom {

class SafetensorsFile : public TensorSource {
public:
    // Maps the file read-only and validates the header; throws loom::Error.
    // A path ending in ".index.json" opens the shards that index names.
    static SafetensorsFile open(const std::string& path);
    static SafetensorsFile open_index(const std::string& index_path);
    // The same validation over a whole file image already in memory; `label`
    // stands for the path in errors. open() is this over a mapping; the fuzzer
    // and tests call it directly. Views returned by get() keep `bytes` alive.
    static SafetensorsFile from_bytes(std::shared_ptr<Storage> bytes, const std::string& label);

    const std::string& path() const override { return path_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Tensor names in file order (ascending data offset, then name).
    const std::vector<std::string>& names() const override { return names_; }
    bool contains(const std::string& name) const override;
    // A zero-copy view into the mapping; the mapping lives as long as any view.
    // Missing names throw an error that names the file and the tensor.
    Tensor get(const std::string& name) const override;
    // Like get, and checks dtype and shape, naming both on mismatch.
    Tensor get(const std::string& name, DType dtype, const Shape& shape) const;
    // dtype and shape without touching the data; missing names throw like get.
    DType dtype(const std::string& name) const;
    const Shape& shape(const std::string& name) const;
    // Bytes of tensor data (the file minus the 8-byte length and the header).
    size_t data_bytes() const;

private:
    std::string path_;
    std::shared_ptr<Storage> mapping_;
    size_t data_start_ = 0;
    struct Entry {
        DType dtype;
        Shape shape;
        size_t begin, end;  // byte range relative to data_start_
        size_t part = 0;    // index into shards_ (sharded checkpoints); 0 otherwise
    };
    struct Shard {
        std::shared_ptr<Storage> mapping;
        size_t data_start;
    };
    std::vector<Shard> shards_;  // empty: the single file in mapping_
    const Entry& entry(const std::string& name) const;
    std::map<std::string, Entry> entries_;
    std::vector<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

// Writes tensors (CPU, any dtype) under their map keys, sorted by name as
// torch's safetensors does, through a temporary file renamed into place.
void safetensors_write(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// model.safetensors in `dir` when everything fits in max_shard_bytes, else
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json (and no
// model.safetensors). Returns the files written.
std::vector<std::string> safetensors_write_sharded(const std::string& dir,
                                                   const std::map<std::string, Tensor>& tensors,
                                                   uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata = {});

// "5GB" (10^9), "2GiB" (2^30), "500MB", "1000" -> bytes, as save_pretrained reads max_shard_size.
uint64_t parse_shard_size(const std::string& text);

// The weights of a model folder: model.safetensors, else model.safetensors.index.json.
std::string safetensors_weights_in(const std::string& dir);

}  // namespace loom
