// Trainer set-up: output folder checks, tokenizer and config, data, model,
// optimizer and schedule. Ordered so the cheap checks that catch most
// mistakes (an unwritable output_dir, a bad config) fail before the data is
// read and tokenized.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/shard_dataset.h"
#include "data/shard_writer.h"
#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "io/object_store.h"
#include "io/safetensors.h"
#include "io/uri.h"
#include "models/stage_extras.h"
#include "ops/gemm.h"
#include "optim/lamb.h"
#include "optim/sgd.h"
#include "parallel/dp_step.h"
#include "parallel/gpu_pipeline.h"
#include "parallel/pipeline_parallel.h"
#include "tokenizer/tokenizer.h"
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
    build_model_and_optimizer();
    if (start_over_ && sync_->is_main()) clear_previous_run();
    if (!resume_dir_.empty()) resume(resume_dir_);
}

Trainer::~Trainer() {
    // DataParallel takes its hooks back off model_, which is declared (and so
    // destroyed) after it.
    dp_.reset();
}

void Trainer::load_tokenizer_and_config() {
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_file(job_.model.tokenizer_path));
    config_ = load_hf_config(job_.model.config_path);
    const Task want = job_.task;
    if (config_.task != want) config_set_task(config_, want);
    const int64_t tok_vocab = int64_t(tokenizer_->vocab_size(true));
    LOOM_CHECK(tok_vocab <= config_.vocab_size,
               "{}: vocab_size {} is smaller than the tokenizer's {} tokens ({}); ids past the "
               "embedding table would be out of range",
               config_.source, config_.vocab_size, tok_vocab, job_.model.tokenizer_path);
}

void Trainer::read_data() {
    const DataArgs& d = job_.data;
    const ReadOptions ro = read_options_for(job_);

    FeaturizeOptions fo;
    fo.task = job_.task;
    fo.max_seq_length = d.max_seq_length;
    fo.doc_stride = d.doc_stride;
    fo.packing = d.packing;
    check_max_length(config_, "data.max_seq_length", d.max_seq_length);

    if (job_.task == Task::sequence_classification) {
        // Label order: the label_map's names in job order, else names the
        // model already carries, else what the data says (featurize).
        if (!d.label_map.empty()) {
            for (const auto& [raw, name] : d.label_map)
                if (std::find(fo.label_names.begin(), fo.label_names.end(), name) ==
                    fo.label_names.end())
                    fo.label_names.push_back(name);
        } else if (!default_label_names(config_.id2label)) {
            fo.label_names = config_.id2label;
        }
    }

    auto load = [&](const std::string& where, const char* channel) {
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
            load_notes_.push_back(
                fmt::format("data.{}: plain text, one record {} (data.sample_by: {})", channel,
                            sample_by_unit(d.sample_by), enum_name(d.sample_by)));
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
        load_notes_.push_back(fmt::format("{} data: {} records -> {} features, {} tokens ({})",
                                          channel, fs_->stats.records, fs_->features.size(),
                                          fs_->stats.tokens, path));
        return fs_;
    };

    if (!d.train.empty() && is_shard_folder(d.train)) {
        train_rows_ = open_train_shards(d.train);
    } else if (!d.train.empty()) {
        auto t = load(d.train, "train");
        if (job_.task == Task::sequence_classification) fo.label_names = t->label_names;
        train_ = t;
        train_rows_ = feature_rows(t);
    }
    LOOM_CHECK(d.eval.empty() || !is_shard_folder(d.eval),
               "data.eval: {} is a token shard folder; evaluation reads text files (JSONL, CSV, "
               "plain text), so give the held-out text itself",
               d.eval);
    if (!d.eval.empty()) eval_ = load(d.eval, "eval");

    if (job_.task == Task::sequence_classification) {
        int64_t n_labels = int64_t(fo.label_names.size());
        std::vector<std::string> names = fo.label_names;
        if (names.empty()) {
            // Integer labels used as they are: as many classes as the largest
            // label needs, at least what the model already has.
            n_labels = config_.num_labels;
            for (const auto* set : {train_.get(), eval_.get()})
                if (set)
                    for (const Feature& f : set->features)
                        n_labels = std::max(n_labels, f.label + 1);
        }
        if (config_.num_labels != n_labels || (!names.empty() && config_.id2label != names)) {
            config_set_task(config_, Task::sequence_classification, n_labels);
            if (!names.empty()) config_.id2label = names;
        }
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
    lo.pad_id = config_.pad_token_id >= 0 ? config_.pad_token_id : std::max<int64_t>(sp.pad, 0);
    lo.mlm_probability = job_.data.mlm_probability;
    lo.mask_id = sp.mask;
    lo.vocab_size = config_.vocab_size;
    lo.special_ids = sp.all;
    if (shuffle) lo.pad_span_batches = job_.training.gradient_accumulation_steps;
    return lo;
}

void Trainer::build_model_and_optimizer() {
    const TrainingArgs& t = job_.training;
    const bool tensor = opts_.tp_comm && opts_.tp_comm->size() > 1;
    // Tensor parallelism rides on the pipeline executor (a single stage when
    // pp is 1): it already builds models from a ModelConfig, gathers rows into
    // global tensors for checkpoints and owns the global grad norm.
    const bool pipeline = (opts_.pp_comm && opts_.pp_comm->size() > 1) || tensor;
    // Pipeline stages build only their part (below); the whole model is built
    // when evaluation or export first needs it (ensure_full_model).
    auto load_or_init = [&](Model& m) {
        if (!job_.model.weights_path.empty()) {
            const LoadReport rep =
                m.load(SafetensorsFile::open(job_.model.weights_path), uint64_t(t.seed));
            for (const auto& n : rep.newly_initialised)
                load_notes_.push_back("newly initialised (not in the checkpoint): " + n);
        } else {
            m.init(uint64_t(t.seed));
            load_notes_.push_back("no weights given: parameters initialised for pretraining");
        }
    };
    if (!pipeline) {
        model_ = build_model(config_);
        load_or_init(*model_);
        model_->set_compute_dtype(compute_dtype());
    }
    const DistributionArgs& dist = job_.distribution;
    if (dist.activation_checkpointing) {
        if (model_)
            model_->set_activation_checkpointing(std::max<int64_t>(dist.checkpoint_every, 1));
        load_notes_.push_back(fmt::format(
            "activation checkpointing: every {} layer application(s) recompute in backward",
            std::max<int64_t>(dist.checkpoint_every, 1)));
    }
    if (dist.offload_activations)
        load_notes_.push_back(
            "offload_activations: on CPU the checkpointed inputs already live in host memory, so "
            "there is nothing to move");
    if (t.fp16) {
        scaler_ = std::make_unique<DynamicLossScale>(opts_.loss_scale);
        state_.loss_scale = scaler_->scale();
    }
    AdamWParams hp;
    hp.lr = t.learning_rate;
    hp.beta1 = t.adam_beta1;
    hp.beta2 = t.adam_beta2;
    hp.eps = t.adam_epsilon;
    hp.weight_decay = t.weight_decay;
    // HF Trainer: no decay for biases and LayerNorm weights (ParamRow::decay);
    // LAMB also leaves them out of layer adaptation (optim/lamb.h).
    LambParams lamb;
    lamb.beta1 = t.adam_beta1;
    lamb.beta2 = t.adam_beta2;
    lamb.eps = t.adam_epsilon;
    lamb.weight_decay = t.weight_decay;
    auto make_lamb = [lamb](ParamTable& table) -> std::unique_ptr<Optimizer> {
        return std::make_unique<Lamb>(table, lamb, DecayPolicy::table);
    };
    // Before any optimizer: on the GPU, AdamW's state lives on the device.
    const bool gpu = choose_gpu();
    // Without oneDNN bf16 kernels bf16 keeps its numerics but not its speed: say so once.
    if (!gpu && t.bf16 && gemm_bf16_route() == Bf16Impl::widen_f32)
        load_notes_.push_back(
            "bf16: this CPU has no bf16 GEMM kernels in oneDNN (needs AVX-512); operands are "
            "rounded to bf16 and multiplied in fp32: same numerics, no speed gain");
    if (pipeline) {
        LOOM_CHECK(opts_.dp_comm != nullptr && opts_.pp_comm != nullptr,
                   "pipeline and tensor parallelism need the dp and pp groups");
        const DistributionArgs& d = job_.distribution;
        LOOM_CHECK(t.optim == OptimizerKind::adamw,
                   "{}: hyperparameters.optim {} under pipeline or tensor parallelism: only "
                   "adamw is supported there so far",
                   job_.source, enum_name(t.optim));
        const int P = opts_.pp_comm->size(), stage = opts_.pp_comm->rank();
        const ScheduleKind kind = d.pipeline;
        const int V = kind == ScheduleKind::interleaved ? int(d.virtual_stages) : 1;
        LOOM_CHECK(V == 1 || d.partition.empty(),
                   "{}: distribution.partition with pipeline: interleaved is not supported; "
                   "leave it out (even split over pipeline_parallel_degree x virtual_stages)",
                   job_.source);
        const int n_micro = int(t.gradient_accumulation_steps * d.microbatches);
        const std::string bad = schedule_check(kind, P, n_micro, V);
        LOOM_CHECK(bad.empty(),
                   "{}: distribution: {} (micro-batches per step = "
                   "gradient_accumulation_steps x microbatches = {})",
                   job_.source, bad, n_micro);
        const int64_t n_apps = model_layer_applications(config_);
        LOOM_CHECK(n_apps >= int64_t(P) * V,
                   "{}: {} pipeline stages x {} virtual stages need at least that many layer "
                   "applications; the model has {}",
                   job_.source, P, V, n_apps);
        // Stages balanced by compute unless the job gives a partition: the
        // last stage's head (GPT-2's LM head costs several layers) counts.
        const StageExtras extras =
            pipeline_stage_extras(config_, job_.data.max_seq_length, job_.data.mlm_probability);
        const std::vector<int64_t> partition =
            d.partition.empty() ? balanced_partition(n_apps, P * V, extras) : d.partition;
        ModelConfig sc = config_;
        if (tensor) sc.tp = ModelTp{opts_.tp_comm->rank(), opts_.tp_comm->size(), opts_.tp_comm};
        const int slots = schedule_max_in_flight(kind, P, stage, n_micro, V);
        std::vector<std::unique_ptr<Model>> models;
        for (int k = 0; k < slots * V; ++k) {
            sc.part = pipeline_chunk_part(n_apps, P, V, stage, k / slots, partition);
            // Instances after the first use its buffers from the start.
            if (k > 0) sc.part.share_with = &models[0]->params();
            auto m = build_model(sc);
            m->set_compute_dtype(compute_dtype());
            if (dist.activation_checkpointing)
                m->set_activation_checkpointing(std::max<int64_t>(dist.checkpoint_every, 1));
            m->set_logits_scope(LogitsScope::labelled_positions);
            models.push_back(std::move(m));
        }
        load_or_init(*models[0]);  // the stage's rows only; the other instances share them
        DpOptions o;
        o.zero = d.zero_stage == 0   ? ZeroStage::none
                 : d.zero_stage == 1 ? ZeroStage::optimizer
                                     : ZeroStage::gradients;
        o.bucket_size_mb = d.bucket_size_mb;
        pp_ = std::make_unique<PipelineParallel>(std::move(models), *opts_.pp_comm, *opts_.dp_comm,
                                                 hp, DecayPolicy::table, o, kind, V);
        pp_->data_parallel().broadcast_parameters();
        std::string layers;
        for (int c = 0; c < V; ++c) {
            const ModelPart p = pipeline_chunk_part(n_apps, P, V, stage, c, partition);
            layers += fmt::format("{}[{}, {}){}{}", c ? ", " : "", p.app_begin, p.app_end,
                                  p.embeddings ? " + embeddings" : "", p.head ? " + head" : "");
        }
        load_notes_.push_back(fmt::format(
            "pipeline stage {} of {}: layer applications {}, {} of {} parameters, {} model "
            "instance(s) per chunk for the micro-batches in flight ({} schedule, {} "
            "micro-batches per step)",
            stage, P, layers, pp_->model().params().num_local_parameters(),
            pp_->model().params().num_parameters(), slots, schedule_kind_name(kind), n_micro));
        std::string sizes;
        for (int64_t n : partition) sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ", n);
        load_notes_.push_back(
            d.partition.empty()
                ? fmt::format("layer applications per stage: [{}], balanced by compute (the "
                              "embeddings count as {:.2f} and the head as {:.2f} layer "
                              "applications; distribution.partition overrides)",
                              sizes, extras.first, extras.last)
                : fmt::format("layer applications per stage: [{}] (distribution.partition)",
                              sizes));
        std::string per_stage;
        for (int64_t n : pp_->params_per_stage())
            per_stage += fmt::format("{}{:.1f}", per_stage.empty() ? "" : ", ",
                                     double(n) * 4.0 / double(1 << 20));
        load_notes_.push_back(fmt::format(
            "parameters per pipeline stage: {} MiB (gradients the same, AdamW's moments twice "
            "that, divided by dp under ZeRO)",
            per_stage));
        if (tensor)
            load_notes_.push_back(fmt::format(
                "tensor parallel rank {} of {}: attention heads and MLP features split "
                "(Megatron column/row-parallel linears), the word embeddings and LM head by "
                "vocabulary; position embeddings, LayerNorms and classification heads "
                "replicated",
                opts_.tp_comm->rank(), opts_.tp_comm->size()));
        if (opts_.dp_comm->size() > 1)
            load_notes_.push_back("data parallel: " +
                                  pp_->data_parallel().memory_plan().describe());
        // Tensor and pipeline parallel on GPUs: the stage's rows (its tp
        // slice) train on the device; pp_ keeps the layout (shared rows, norm
        // ranges, gathers, checkpoints).
        if (gpu) setup_gpu(hp);
    } else if (gpu) {
        setup_gpu(hp);
    } else if (opts_.dp_comm && opts_.dp_comm->size() > 1) {
        const DistributionArgs& d = job_.distribution;
        DpOptions o;
        o.zero = d.zero_stage == 0   ? ZeroStage::none
                 : d.zero_stage == 1 ? ZeroStage::optimizer
                                     : ZeroStage::gradients;
        o.bucket_size_mb = d.bucket_size_mb;
        o.overlap = d.overlap_comm;
        o.sparse_embedding_grad = d.sparse_embedding_grads;
        if (t.optim == OptimizerKind::lamb) o.make_optimizer = make_lamb;
        if (t.optim == OptimizerKind::sgd)
            o.make_optimizer =
                [wd = t.weight_decay](ParamTable& table) -> std::unique_ptr<Optimizer> {
                return std::make_unique<Sgd>(table, wd, DecayPolicy::table);
            };
        dp_ = std::make_unique<DataParallel>(*model_, *opts_.dp_comm, hp, DecayPolicy::table, o);
        // Replicas start from rank 0's parameters whatever each loaded.
        dp_->broadcast_parameters();
        load_notes_.push_back("data parallel: " + dp_->memory_plan().describe());
        if (dp_->sparse_embedding_grad())
            load_notes_.push_back(
                "data parallel: the word embeddings' lookup gradient is exchanged as rows after "
                "backward, so their table is reduced while backward runs "
                "(distribution.sparse_embedding_grads: false reduces it densely)");
    } else if (t.optim == OptimizerKind::lamb) {
        optimizer_ = make_lamb(model_->params());
    } else if (t.optim == OptimizerKind::sgd) {
        optimizer_ = std::make_unique<Sgd>(model_->params(), t.weight_decay, DecayPolicy::table);
    } else {
        optimizer_ = std::make_unique<AdamW>(model_->params(), hp, DecayPolicy::table);
    }
    if (pp_) {
        engine_ = pp_.get();
    } else if (dp_) {
        engine_ = dp_.get();
    } else if (optimizer_) {
        single_ = std::make_unique<SingleStep>(*model_, *optimizer_);
        engine_ = single_.get();
    }

    state_.seed = uint64_t(t.seed);
    state_.data_seed = uint64_t(t.data_seed);
    if (train_rows_) {
        loader_ = std::make_unique<Loader>(train_rows_,
                                           loader_options(t.per_device_train_batch_size, true));
        plan_ = plan_steps(t, job_.checkpoint, train_rows_->size(), sync_->dp_size());
        LrScheduleArgs la;
        la.type = t.lr_scheduler_type;
        la.base_lr = t.learning_rate;
        la.warmup_steps = plan_.warmup_steps;
        la.total_steps = plan_.total_steps;
        la.lr_end = t.lr_end;
        la.power = t.power;
        la.num_cycles = t.num_cycles;
        schedule_ = std::make_unique<LrSchedule>(la);
        state_.total_steps = plan_.total_steps;
    }
}

std::string Trainer::gpu_unsupported_reason() const {
    const TrainingArgs& t = job_.training;
    const bool tensor = opts_.tp_comm && opts_.tp_comm->size() > 1;
    const bool pipeline = opts_.pp_comm && opts_.pp_comm->size() > 1;
    const bool data = opts_.dp_comm && opts_.dp_comm->size() > 1;
    if (pipeline && !opts_.make_gpu_group)
        return "runs pipeline parallelism over NCCL only, and this build or launch has none";
    if (tensor && !opts_.make_gpu_group)
        return "runs tensor parallelism over NCCL only, and this build or launch has none";
    if (data && !opts_.make_gpu_grad_sync)
        return "reduces data-parallel gradients over NCCL only, and this build or launch has none";
    // LAMB's per-tensor norms would span the tp ranks' slices.
    if (tensor && t.optim != OptimizerKind::adamw)
        return fmt::format("runs tensor parallelism with AdamW only so far (optim: {})",
                           enum_name(t.optim));
    return "";
}

bool Trainer::choose_gpu() {
    const bool tensor = opts_.tp_comm && opts_.tp_comm->size() > 1;
    const bool pipeline = opts_.pp_comm && opts_.pp_comm->size() > 1;
    // Pipeline stages and tensor-parallel slices are built through pp_ and
    // train their part on the GPU.
    if (job_.training.use_cpu) return false;
    std::string why;
    bool gpu = false;
    if (opts_.make_gpu_model) {
        why = gpu_unsupported_reason();
        gpu = why.empty();
    }
    // Pipeline stages hand each other device buffers, and their replicas and
    // tp slices join them: one rank on the CPU would hang the job, so the
    // whole job agrees (before the per-group checks below, which then pass).
    if (pipeline && opts_.world_comm) {
        double n = gpu ? 1.0 : 0.0;
        opts_.world_comm->all_reduce(&n, 1, DType::f64, ReduceOp::sum)->wait();
        LOOM_CHECK(n == 0 || int(n) == opts_.world_comm->size(),
                   "{} of the {} ranks of this pipeline-parallel job can train on a GPU (rank "
                   "{}: {}); give every rank a GPU, or set hyperparameters.use_cpu: true",
                   int(n), opts_.world_comm->size(), opts_.world_comm->rank(),
                   gpu ? "yes" : (why.empty() ? "no CUDA device or no CUDA build" : why));
    }
    // The ranks of a tp group run one model's collectives together: a slice
    // on the CPU and one on a GPU would hang, so they agree too.
    if (tensor) {
        double n = gpu ? 1.0 : 0.0;
        opts_.tp_comm->all_reduce(&n, 1, DType::f64, ReduceOp::sum)->wait();
        LOOM_CHECK(n == 0 || int(n) == opts_.tp_comm->size(),
                   "{} of the {} tensor-parallel ranks can train on a GPU (tp rank {}: {}); give "
                   "every rank a GPU, or set hyperparameters.use_cpu: true",
                   int(n), opts_.tp_comm->size(), opts_.tp_comm->rank(),
                   gpu ? "yes" : (why.empty() ? "no CUDA device or no CUDA build" : why));
    }
    // Replicas that chose differently would post different collectives
    // (NCCL's set-up against DataParallel's broadcast) and hang: agree first.
    // The condition is the same on every rank (one job, one layout).
    if (opts_.dp_comm && opts_.dp_comm->size() > 1) {
        const double n = sync_->sum(gpu ? 1.0 : 0.0);
        LOOM_CHECK(n == 0 || int64_t(n) == sync_->dp_size(),
                   "{} of the {} data-parallel ranks can train on a GPU (dp rank {}: {}); give "
                   "every rank a GPU, or set hyperparameters.use_cpu: true",
                   int64_t(n), sync_->dp_size(), sync_->dp_rank(),
                   gpu ? "yes" : (why.empty() ? "no CUDA device or no CUDA build" : why));
    }
    if (!why.empty())
        load_notes_.push_back("training on the CPU: the GPU executor " + why +
                              " (hyperparameters.use_cpu: true silences this)");
    return gpu;
}

// Builds the executor (it uploads the host parameters) and, under data
// parallelism, the NCCL gradient reduction over the dp group.
void Trainer::setup_gpu(const AdamWParams& hp) {
    const bool data = opts_.dp_comm && opts_.dp_comm->size() > 1;
    if (data) {
        // Replicas start from rank 0's parameters whatever each loaded, and
        // the host table, which checkpoints and evaluation read back into,
        // agrees with the device. (A resume then loads the same checkpoint
        // on every rank and uploads it.)
        ParamTable& p = train_model().params();
        opts_.dp_comm->broadcast(p.params_data(), p.flat_numel(), DType::f32, 0)->wait();
    }
    CudaModelOptions o;
    o.dtype = compute_dtype();
    o.adamw = hp;
    const OptimizerKind optim = job_.training.optim;
    o.optimizer = optim;
    const DistributionArgs& d = job_.distribution;
    o.checkpoint_every = d.activation_checkpointing ? std::max<int64_t>(d.checkpoint_every, 1) : 0;
    o.offload_activations = d.offload_activations;
    o.loading_horizon = d.activation_loading_horizon;
    if (opts_.tp_comm && opts_.tp_comm->size() > 1) {
        // Collective over tp (every rank of the group builds its twin here).
        gpu_tp_ = opts_.make_gpu_group(*opts_.tp_comm);
        o.tp = gpu_tp_.get();
    }
    gpu_ = opts_.make_gpu_model(train_model(), o);
    if (opts_.pp_comm && opts_.pp_comm->size() > 1) {
        // Collective over pp: the stages' device twin, then the executor
        // instances (one per micro-batch in flight, as pp_'s models).
        gpu_pp_ = opts_.make_gpu_group(*opts_.pp_comm);
        gpu_pipe_ = std::make_unique<GpuPipeline>(*gpu_, *pp_, *gpu_pp_, *opts_.pp_comm);
        load_notes_.push_back(fmt::format(
            "pipeline on GPUs: {} executor instance(s) (one set of activations per micro-batch "
            "in flight) on the stage's parameters; hidden states and their gradients go "
            "between stages over NCCL in the compute type",
            gpu_pipe_->n_instances()));
    }
    load_notes_.push_back(
        fmt::format("training on {} ({}, fp32 master weights, {} on the device); evaluation and "
                    "checkpoints copy the parameters back to the host",
                    gpu_->device_name(),
                    job_.training.bf16   ? "bf16 compute"
                    : job_.training.fp16 ? "fp16 compute with dynamic loss scaling"
                                         : "fp32",
                    optim == OptimizerKind::sgd ? "SGD (stateless)"
                                                : fmt::format("{} state", enum_name(optim))));
    if (!data) return;
    GpuGradSyncOptions g;
    g.bucket_size_mb = d.bucket_size_mb;
    g.overlap = d.overlap_comm;
    g.zero_stage = int(d.zero_stage);
    g.state_bytes_per_param = optim == OptimizerKind::sgd ? 0 : 8;
    gpu_sync_ = opts_.make_gpu_grad_sync(*gpu_, g);
    load_notes_.push_back(std::string("data parallel on GPUs") +
                          (d.zero_stage == 0 ? " (ZeRO-0, optimizer state replicated)" : "") +
                          ": " + gpu_sync_->describe());
}

}  // namespace loom
