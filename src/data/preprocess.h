// Preprocess: raw corpora -> token shards (`loom preprocess`).
//
// Documents come from any reader input (plain text, JSONL, CSV, folders,
// .gz/.zst); each record is one document (plain text: one line by default,
// as `loom train` reads the same file; sample_by paragraph or document).
// Documents are tokenized on all cores, then packed into sequences of at
// most max_seq_length tokens, in input order:
//   masked LM:  the tokenizer's own special tokens around each chunk of a
//               document ([CLS] chunk [SEP] for BERT, <s> chunk </s> for
//               RoBERTa); chunks never cross documents.
//   masked LM with sentence_order (ALBERT's SOP): each chunk is split into
//               segments A and B at a sentence end (a token ".", "!" or "?"
//               chosen by a seeded draw, the middle when there is none) and
//               written [CLS] A [SEP] B [SEP], or swapped with label 1 for
//               half of them (keyed by the document and chunk index, so the
//               output does not depend on the thread count).
//   causal LM:  documents joined with the EOS token between them and cut
//               into full max_seq_length sequences (the short tail is
//               dropped, as HF's run_clm group_texts does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/task.h"
#include "data/record.h"

namespace loom {

struct PreprocessOptions {
    std::vector<std::string> inputs;  // files or folders
    // A new (or empty) folder, or an s3://bucket/prefix without a shard
    // folder or other objects: shards are then staged in the cache
    // (io/object_store.h) and uploaded, index.json last, and the staging
    // folder is removed. Shard objects of a stopped upload (no index.json)
    // are replaced.
    std::string output;
    std::string tokenizer_path;   // tokenizer.json
    Task task = Task::masked_lm;  // masked_lm or causal_lm
    int64_t max_seq_length = 128;
    bool sentence_order = false;  // masked LM only
    std::string text_column = "text";
    SampleBy sample_by = SampleBy::line;  // plain text: what one document is
    std::string eos_token;                // causal LM; "" = the tokenizer's <|endoftext|> or </s>
    uint64_t shard_bytes = uint64_t(256) << 20;
    int threads = 0;                 // <= 0: all cores
    uint64_t seed = 12345;           // sentence-order splits and swaps
    int64_t batch_documents = 2048;  // documents tokenized per parallel batch
    // Called after each batch with the bytes of text tokenized so far.
    std::function<void(uint64_t text_bytes)> progress;
};

struct PreprocessReport {
    int64_t documents = 0, sequences = 0, tokens = 0;
    uint64_t text_bytes = 0;  // UTF-8 bytes of document text tokenized
    double seconds = 0;
    int id_bytes = 2;
    std::vector<std::string> files;  // the input files read, in order
    size_t uploaded_files = 0;       // output in an object store: files put there
    int64_t text_files = 0;          // of which plain text (split by sample_by)
};

PreprocessReport preprocess(const PreprocessOptions& o);

}  // namespace loom
