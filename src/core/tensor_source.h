// TensorSource: named tensors to load parameters from (a safetensors file,
// a sharded checkpoint, a test's map), so the model code that loads by HF name
// needs no file format.
//
// get() returns a CPU tensor in the source's own dtype and global shape; the
// loader converts and slices. path() stands for the source in errors.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

class TensorSource {
  public:
    virtual ~TensorSource() = default;
    virtual const std::string& path() const = 0;
    // Every tensor name, in the source's order.
    virtual const std::vector<std::string>& names() const = 0;
    virtual bool contains(const std::string& name) const = 0;
    // Missing names throw an error naming the source and the tensor.
    virtual Tensor get(const std::string& name) const = 0;
};

}  // namespace loom
