// Trainer set-up: output folder checks, tokenizer and config, data, and
// whether the job trains on a GPU (the model, optimizer and schedule are
// built in trainer_model.cpp). Ordered so the cheap checks that catch most
// mistakes (an unwritable output_dir, a bad config) fail before the data is
// read and tokenized.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/runtime.h"
#include "data/shard_dataset.h"
#include "data/shard_writer.h"
#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "io/object_store.h"
#include "io/uri.h"
#include "parallel/dp_step.h"
#include "parallel/pipeline_parallel.h"
#include "tokenizer/tokenizer.h"
#include "train/export_peft.h"
#include "train/job_identity.h"
#include "train/log_jsonl.h"
#include "train/log_tensorboard.h"
#include "train/progress.h"
#include "train/read_options.h"
#include "train/remote_job.h"
#include "train/replica_sync_comm.h"
#include "train/trainer.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// HF's default names LABEL_0.. carry no information.
bool default_label_names(const std::vector<std::string>& names) {
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] != "LABEL_" + std::to_string(i)) return false;
    return true;
}

struct SpecialIds {
    int64_t mask = -1, pad = -1;
    std::vector<int64_t> all;
};

// Special tokens from tokenizer.json's added_tokens (what HF's
// special_tokens_mask covers: never masked for masked LM).
SpecialIds special_ids(const std::string& tokenizer_path) {
    SpecialIds s;
    json j;
    try {
        j = json::parse(read_file(tokenizer_path));
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON ({})", tokenizer_path, e.what());
    }
    if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) return s;
    for (const json& t : j["added_tokens"]) {
        if (!t.value("special", false)) continue;
        const int64_t id = t.value("id", int64_t(-1));
        const std::string c = t.value("content", "");
        if (id < 0) continue;
        s.all.push_back(id);
        if (c == "[MASK]" || c == "<mask>") s.mask = id;
        if (c == "[PAD]" || c == "<pad>") s.pad = id;
    }
    return s;
}

// config.json's eos_token_id (the first, where it is a list as in Llama 3),
// or -1. The end token a decoder's generation stops at.
int64_t config_eos_id(const std::string& config_path) {
    json j;
    try {
        j = json::parse(read_file(config_path));
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON ({})", config_path, e.what());
    }
    auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) return -1;
    const json& v = it->is_array() && !it->empty() ? it->front() : *it;
    LOOM_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0,
               "{}: eos_token_id must be a token id (or a list of them), got {}", config_path,
               it->dump());
    return v.get<int64_t>();
}

// The id padding is written with. config.json's pad_token_id, else the
// tokenizer's [PAD]/<pad>; for a causal LM without either (GPT-2, Llama,
// Mistral), the end token, as HF fine-tuning sets pad_token = eos_token. The
// value is never trained on: padding has attention_mask 0 and label -100.
int64_t pad_id_for(const ModelConfig& config, const SpecialIds& sp, Task task, int64_t eos) {
    if (config.pad_token_id >= 0) return config.pad_token_id;
    if (sp.pad >= 0) return sp.pad;
    if (task == Task::causal_lm && eos >= 0 && eos < config.vocab_size) return eos;
    return 0;
}

}  // namespace

Trainer::Trainer(Job job, TrainerOptions options)
    : job_(std::move(job)), opts_(std::move(options)) {
    if (opts_.sync) {
        sync_ = opts_.sync;
    } else if (opts_.dp_comm && (opts_.dp_comm->size() > 1 || opts_.world_comm)) {
        comm_sync_ = std::make_unique<CommReplicaSync>(*opts_.dp_comm, opts_.world_comm);
        sync_ = comm_sync_.get();
    } else {
        sync_ = &local_sync_;
    }
    remote_ = std::make_unique<RemoteJob>(job_, load_notes_);
    if (!opts_.evaluation_only) {
        identity_ = job_identity(job_, sync_->dp_size());
        check_output_dir();
        choose_start();
    }
    load_tokenizer_and_config();
    read_data();
    // Reading and tokenizing freed most of what it allocated (43 MiB per rank
    // for 1.4 MB of JSONL text), which the model's buffers do not reuse.
    runtime_release_freed_memory();
    build_model_and_optimizer();
    if (start_over_ && sync_->is_main()) clear_previous_run();
    if (!resume_dir_.empty()) resume(resume_dir_);
}

Trainer::~Trainer() {
    // The engines first: DataParallel takes its hooks back off model_.
    engines_.reset();
}

void Trainer::load_tokenizer_and_config() {
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_file(job_.model.tokenizer_path));
    config_ = load_hf_config(job_.model.config_path);
    const Task want = job_.task;
    if (config_.task != want) config_set_task(config_, want);
    if (job_.peft.enabled) {
        // LoRA: the model builds adapters on the targeted linears and freezes the rest.
        const PeftArgs& p = job_.peft;
        LoraSpec& l = config_.lora;
        l.r = p.r;
        l.lora_alpha = p.lora_alpha;
        l.lora_dropout = p.lora_dropout;
        l.target_modules = p.target_modules;
        l.modules_to_save = p.modules_to_save;
        if (l.target_modules.empty()) {
            l.target_modules = peft_default_targets(config_.family);
            std::string names;
            for (const auto& n : l.target_modules) names += (names.empty() ? "" : ", ") + n;
            load_notes_.push_back(
                fmt::format("peft.target_modules not given: PEFT's default for {} ({})",
                            family_name(config_.family), names));
        }
    }
    const int64_t tok_vocab = int64_t(tokenizer_->vocab_size(true));
    LOOM_CHECK(tok_vocab <= config_.vocab_size,
               "{}: vocab_size {} is smaller than the tokenizer's {} tokens ({}); ids past the "
               "embedding table would be out of range",
               config_.source, config_.vocab_size, tok_vocab, job_.model.tokenizer_path);
    choose_export_dtype();
}

void Trainer::read_data() {
    const DataArgs& d = job_.data;
    const ReadOptions ro = read_options_for(job_);

    FeaturizeOptions fo;
    fo.task = job_.task;
    fo.max_seq_length = d.max_seq_length;
    fo.doc_stride = d.doc_stride;
    fo.packing = d.packing;
    fo.pack_documents = d.pack_boundaries;
    if (job_.task == Task::causal_lm) {
        fo.eos_id = config_eos_id(job_.model.config_path);
        if (!d.prompt_column.empty()) {
            LOOM_CHECK(fo.eos_id >= 0,
                       "{}: instruction data (data.prompt_column) puts the end-of-sequence token "
                       "after each completion, and config.json has no eos_token_id",
                       job_.model.config_path);
            LOOM_CHECK(fo.eos_id < config_.vocab_size,
                       "{}: eos_token_id {} is outside the vocabulary ({})", job_.model.config_path,
                       fo.eos_id, config_.vocab_size);
        }
        const SpecialIds sp = special_ids(job_.model.tokenizer_path);
        if (config_.pad_token_id < 0 && sp.pad < 0)
            load_notes_.push_back(fmt::format(
                "causal-lm: config.json has no pad_token_id and the tokenizer no pad token; "
                "padding uses {} (padded positions get attention_mask 0 and label -100)",
                fo.eos_id >= 0
                    ? fmt::format("eos_token_id {}, as HF fine-tuning sets pad = eos", fo.eos_id)
                    : std::string("id 0")));
        if (d.pack_boundaries)
            load_notes_.push_back(
                "causal-lm packing keeps document boundaries (data.pack_boundaries): positions "
                "restart at each text, attention stays inside it, its first token is no target");
        // Dynamic rope takes its base from one length per forward; the block's
        // is the same on every layout, where the longest document (HF 4.40's
        // max(position_ids) + 1) would change with the micro-batch split.
        if (d.pack_boundaries && config_.rope_scaling_dynamic &&
            d.max_seq_length > config_.max_position_embeddings)
            load_notes_.push_back(fmt::format(
                "dynamic rope_scaling with packed documents: every document's base comes from "
                "the block length data.max_seq_length {} (past max_position_embeddings {}), not "
                "from its own length; HF 4.40 would use the longest document of the forward",
                d.max_seq_length, config_.max_position_embeddings));
        if (!d.prompt_column.empty())
            load_notes_.push_back(fmt::format(
                "causal-lm instruction data: tokens = prompt + completion with the tokenizer's "
                "special tokens, then eos_token_id {}; the loss counts completion tokens only",
                fo.eos_id));
    }
    check_max_length(config_, "data.max_seq_length", d.max_seq_length);
    if (job_.task == Task::sequence_classification) fo.label_names = initial_label_names();

    if (!d.train.empty() && is_shard_folder(d.train)) {
        LOOM_CHECK(!d.pack_boundaries,
                   "data.pack_boundaries: {} is a token shard folder, whose blocks carry no "
                   "document boundaries; train on the text files, or drop pack_boundaries",
                   d.train);
        train_rows_ = open_train_shards(d.train);
    } else if (!d.train.empty()) {
        auto t = load_channel(d.train, "train", ro, fo);
        if (job_.task == Task::sequence_classification) fo.label_names = t->label_names;
        train_ = t;
        train_rows_ = feature_rows(t);
    }
    LOOM_CHECK(d.eval.empty() || !is_shard_folder(d.eval),
               "data.eval: {} is a token shard folder; evaluation reads text files (JSONL, CSV, "
               "plain text), so give the held-out text itself",
               d.eval);
    if (!d.eval.empty()) eval_ = load_channel(d.eval, "eval", ro, fo);
    if (job_.task == Task::sequence_classification) fit_label_count(fo.label_names);
}

// Label order: the label_map's names in job order, else names the model
// already carries, else (empty) what the data says (featurize).
std::vector<std::string> Trainer::initial_label_names() const {
    std::vector<std::string> names;
    if (!job_.data.label_map.empty()) {
        for (const auto& [raw, name] : job_.data.label_map)
            if (std::find(names.begin(), names.end(), name) == names.end())
                names.push_back(name);
    } else if (!default_label_names(config_.id2label)) {
        names = config_.id2label;
    }
    return names;
}

// One data channel's records, featurized; notes what was cached, skipped and
// truncated. Sets fo.files to the files read.
std::shared_ptr<const FeatureSet> Trainer::load_channel(const std::string& where,
                                                        const char* channel,
                                                        const ReadOptions& ro,
                                                        FeaturizeOptions& fo) {
    const DataArgs& d = job_.data;
    // s3:// and http(s):// files or prefixes are fetched into the local
    // cache once (io/object_store.h) and read from there.
    const std::string path = is_remote_uri(where) ? fetch_to_cache(where) : where;
    if (path != where)
        load_notes_.push_back(fmt::format("{} data: {} cached as {}", channel, where, path));
    ReadReport report;
    auto reader = open_records(path, ro);
    std::vector<Record> records;
    Record r;
    while (reader->next(r)) records.push_back(r);
    report = reader->report();
    fo.files = reader->files();
    // The same text file is the same data through loom preprocess: say how it was split.
    if (report.text_files > 0)
        load_notes_.push_back(fmt::format("data.{}: plain text, one record {} (data.sample_by: {})",
                                          channel, sample_by_unit(d.sample_by),
                                          enum_name(d.sample_by)));
    if (report.bad_lines > 0) {
        std::string msg = fmt::format("{} data: skipped {} malformed line(s) (skip_bad_lines)",
                                      channel, report.bad_lines);
        for (const auto& e : report.bad_examples) msg += "\n    " + e;
        load_notes_.push_back(msg);
    }
    auto fs_ = std::make_shared<FeatureSet>(featurize(records, *tokenizer_, fo));
    LOOM_CHECK(!fs_->features.empty(), "{} data {}: no usable example after tokenization",
               channel, path);
    if (fs_->stats.truncated > 0)
        load_notes_.push_back(fmt::format(
            "{} data: {} of {} texts were longer than max_seq_length {} and were truncated",
            channel, fs_->stats.truncated, fs_->stats.records, d.max_seq_length));
    if (fs_->stats.boundary_tokens > 0)
        load_notes_.push_back(fmt::format(
            "{} data: {} token(s) cross the prompt/completion boundary (the tokenizer merged the "
            "prompt's end with the completion's start); they count as prompt and are not trained "
            "on",
            channel, fs_->stats.boundary_tokens));
    load_notes_.push_back(fmt::format("{} data: {} records -> {} features, {} tokens ({})", channel,
                                      fs_->stats.records, fs_->features.size(), fs_->stats.tokens,
                                      path));
    return fs_;
}

// The classification head sized for the labels: the names found, or with
// integer labels used as they are, as many classes as the largest label
// needs, at least what the model already has.
void Trainer::fit_label_count(const std::vector<std::string>& names) {
    int64_t n_labels = int64_t(names.size());
    if (names.empty()) {
        n_labels = config_.num_labels;
        for (const auto* set : {train_.get(), eval_.get()})
            if (set)
                for (const Feature& f : set->features) n_labels = std::max(n_labels, f.label + 1);
    }
    if (config_.num_labels != n_labels || (!names.empty() && config_.id2label != names)) {
        config_set_task(config_, Task::sequence_classification, n_labels);
        if (!names.empty()) config_.id2label = names;
    }
}

// A shard folder written by `loom preprocess` for this job's task and tokenizer.
std::shared_ptr<const RowSource> Trainer::open_train_shards(const std::string& dir) {
    auto ds = ShardDataset::open(dir);
    const ShardFolderInfo& s = ds->info();
    LOOM_CHECK(s.task == job_.task,
               "data.train: the shards in {} were made for {}, the job's task is {} (run loom "
               "preprocess --task {})",
               dir, enum_name(s.task), enum_name(job_.task), enum_name(job_.task));
    const std::string hash = tokenizer_hash_hex(job_.model.tokenizer_path);
    LOOM_CHECK(s.tokenizer_hash == hash,
               "data.train: the shards in {} were tokenized with another tokenizer (hash {}) than "
               "the job's {} (hash {}); run loom preprocess with the job's tokenizer",
               dir, s.tokenizer_hash, job_.model.tokenizer_path, hash);
    LOOM_CHECK(s.vocab_size <= config_.vocab_size,
               "data.train: the shards in {} use {} token ids, the model's vocab_size is {}", dir,
               s.vocab_size, config_.vocab_size);
    LOOM_CHECK(s.max_seq_length <= config_.max_positions(),
               "data.train: the shards in {} hold sequences of up to {} tokens, more than the "
               "model accepts: {}",
               dir, s.max_seq_length, describe_max_positions(config_));
    if (s.max_seq_length != job_.data.max_seq_length)
        load_notes_.push_back(fmt::format(
            "train data: the shards were packed to {} tokens; data.max_seq_length ({}) does not "
            "apply to them",
            s.max_seq_length, job_.data.max_seq_length));
    load_notes_.push_back(fmt::format("train data: {} sequences, {} tokens in {} shard(s) ({}){}",
                                      s.sequences, s.tokens, s.shard_files.size(), dir,
                                      s.sentence_order ? ", with sentence-order pairs" : ""));
    return ds;
}

LoaderOptions Trainer::loader_options(int64_t batch_size, bool shuffle) const {
    const SpecialIds sp = special_ids(job_.model.tokenizer_path);
    LoaderOptions lo;
    lo.batch_size = batch_size;
    lo.dp_rank = sync_->dp_rank();
    lo.dp_size = sync_->dp_size();
    lo.shuffle = shuffle;
    lo.drop_last = shuffle && job_.training.dataloader_drop_last;
    lo.seed = uint64_t(job_.training.data_seed);
    lo.pad_to_multiple_of = job_.data.pad_to_multiple_of;
    lo.pad_id =
        pad_id_for(config_, sp, job_.task,
                   job_.task == Task::causal_lm ? config_eos_id(job_.model.config_path) : -1);
    lo.mlm_probability = job_.data.mlm_probability;
    lo.mask_id = sp.mask;
    lo.vocab_size = config_.vocab_size;
    lo.special_ids = sp.all;
    if (shuffle) lo.pad_span_batches = job_.training.gradient_accumulation_steps;
    return lo;
}

std::string Trainer::training_on_note(const std::string& device) const {
    const TrainingArgs& t = job_.training;
    return fmt::format(
        "training on {} ({}, fp32 master weights, {} on the device); evaluation and checkpoints "
        "copy the parameters back to the host",
        device,
        t.bf16   ? "bf16 compute"
        : t.fp16 ? "fp16 compute with dynamic loss scaling"
                 : "fp32",
        t.optim == OptimizerKind::sgd ? "SGD (stateless)"
                                      : fmt::format("{} state", enum_name(t.optim)));
}

void Trainer::replicas_agree_on_gpu(bool gpu, const std::string& why) {
    const double n = sync_->sum(gpu ? 1.0 : 0.0);
    LOOM_CHECK(n == 0 || int64_t(n) == sync_->dp_size(),
               "{} of the {} data-parallel ranks can train on a GPU (dp rank {}: {}); give every "
               "rank a GPU, or set hyperparameters.use_cpu: true",
               int64_t(n), sync_->dp_size(), sync_->dp_rank(),
               gpu ? "yes" : (why.empty() ? "no CUDA device or no CUDA build" : why));
}

}  // namespace loom
