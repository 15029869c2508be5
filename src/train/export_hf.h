// Hugging Face model folders as save_pretrained writes them:
//   config.json              (config_to_json: architectures, id2label, label2id, ...)
//   model.safetensors        parameters by HF name, tied aliases once
//   tokenizer.json           the tokenizer the model was trained with, unchanged
//   tokenizer_config.json    tokenizer_class and special tokens, for AutoTokenizer
//   special_tokens_map.json
// Every file is written atomically (temporary name, fsync, rename), so a
// reader never sees half a file; the folder as a whole is not atomic.
//
// Special tokens come from tokenizer.json's added_tokens (those marked
// special), their roles read from their text ([CLS], <s>, <|endoftext|>, ...).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "models/model_config.h"

namespace loom {

// tokenizer_config.json and special_tokens_map.json for a tokenizer.json
// (its text) used by a model of `config`'s family.
std::string tokenizer_config_json(const std::string& tokenizer_json, const ModelConfig& config);
std::string special_tokens_map_json(const std::string& tokenizer_json);

// The text files of an HF folder besides the weights: name -> contents
// (config.json always; the tokenizer files when tokenizer_path is not empty).
std::map<std::string, std::string> hf_side_files(const ModelConfig& config,
                                                 const std::string& tokenizer_path);

// Writes a complete HF folder into `dir` (created if missing).
// Weights past max_shard_bytes are split into shards with an index
// (safetensors_write_sharded), as save_pretrained's max_shard_size does.
// Floating-point weights are written in config.torch_dtype (rounded to
// nearest even from the fp32 masters, as torch's .to() does), and
// config.json says so.
void export_hf_folder(const std::string& dir, const ModelConfig& config,
                      const std::map<std::string, Tensor>& params,
                      const std::string& tokenizer_path,
                      uint64_t max_shard_bytes = 5'000'000'000ull);

}  // namespace loom
