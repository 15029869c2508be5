// Batch: the integer tensors of one saved training batch, by key.
//
// A batch file is a safetensors file such as the fixtures' batch.safetensors:
// input_ids, attention_mask, token_type_ids, position_ids (packed documents,
// ModelInputs::position_ids) (B, T), and labels (B, T) or (B),
// or start_positions / end_positions (B). Every tensor is I64 in memory: I32
// files are widened on load, any other dtype is an error naming the key.
// The tensors are owned copies, not views of the file, so collators and tests
// may write into them.
//
// Not done here: checking that keys agree on B and T; the model that consumes
// a batch knows which shapes it needs and checks them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model_inputs.h"
#include "core/task.h"
#include "core/tensor.h"

namespace loom {

struct Batch {
    std::string path;                      // where it was loaded from, for errors
    std::map<std::string, Tensor> tensors;  // key -> I64 tensor

    // The tensor under `key`; a missing key is an error naming the file, the
    // key, and the keys present.
    const Tensor& require(const std::string& key) const;
    // The tensor under `key`, or nothing (optional inputs like token_type_ids).
    std::optional<Tensor> find(const std::string& key) const;
    bool contains(const std::string& key) const { return tensors.count(key) != 0; }
    std::vector<std::string> keys() const;
};

// Loads every tensor of a safetensors file as I64.
Batch load_batch(const std::string& path);

// Label keys a task reads: {"labels"} or {"start_positions", "end_positions"}.
std::vector<std::string> label_keys(Task task);

// Views into `batch` (which must outlive the inputs) for a model with head
// `task`, every shape checked (errors name the batch file, the key, and the
// expected and found shapes). With `require_labels` the task's label keys
// must be present (training, --backward).
ModelInputs inputs_from_batch(const Batch& batch, Task task, bool require_labels);

}  // namespace loom
