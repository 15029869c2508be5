// Model arguments that may be Hugging Face Hub ids: resolved to a snapshot
// folder in the shared cache (io/hf_hub.h) before anything reads the files.
// Not here: the download itself, or pushes.
#pragma once

#include <string>

#include "config/job.h"

namespace loom::cli {

// When the job names its model by Hub id, fills config, tokenizer and
// weights from the resolved snapshot; a folder job is left alone.
void resolve_hub_model(Job& job);

// `--model` of predict and forward: an existing folder as it is, otherwise a
// Hub id (with an optional revision) resolved to its snapshot folder.
std::string model_folder_or_hub(const std::string& arg, const std::string& revision = "");

}  // namespace loom::cli
