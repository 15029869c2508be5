// Trainer set-up, the model half: the model (whole, or this rank's pipeline
// stage and tensor-parallel slice) with its weights, the optimizer and step
// engine for the layout, then the loader, step plan and learning-rate
// schedule. Invariant: every rank of a layout builds the same shapes and
// posts the same collectives in the same order. The model stack is built on
// the job's device (choose_stack_device) and stepped by the same engines
// there; nothing here reads data or touches output_dir.
#include <fmt/format.h>

#include "core/check.h"
#include "io/safetensors.h"
#include "models/model_placement.h"
#include "models/stage_extras.h"
#include "ops/gemm.h"
#include "ops/device_ops.h"
#include "parallel/step_engines.h"
#include "train/trainer.h"

namespace loom {

namespace {

// The data-parallel reduction's options (a pipeline turns overlap off for its
// own reduction: pipeline_parallel.h).
DpOptions dp_options_for(const DistributionArgs& d) {
    DpOptions o;
    o.zero = d.zero_stage == 0   ? ZeroStage::none
             : d.zero_stage == 1 ? ZeroStage::optimizer
                                 : ZeroStage::gradients;
    o.bucket_size_mb = d.bucket_size_mb;
    o.overlap = d.overlap_comm;
    o.sparse_embedding_grad = d.sparse_embedding_grads;
    return o;
}

AdamWParams adamw_params(const TrainingArgs& t) {
    AdamWParams hp;
    hp.lr = t.learning_rate;
    hp.beta1 = t.adam_beta1;
    hp.beta2 = t.adam_beta2;
    hp.eps = t.adam_epsilon;
    hp.weight_decay = t.weight_decay;
    return hp;
}

// The job's optimizer. HF Trainer: no decay for biases and LayerNorm
// weights (ParamRow::decay); LAMB also leaves them out of layer adaptation
// (optim/lamb.h).
OptimizerConfig optimizer_config(const TrainingArgs& t) {
    OptimizerConfig c;
    c.kind = t.optim;
    c.hp = adamw_params(t);
    c.decay = DecayPolicy::table;
    return c;
}

}  // namespace

// This rank's place in the pipeline, checked against the job and the model.
struct Trainer::PipelineShape {
    int P = 1, stage = 0;  // stages, and this rank's
    ScheduleKind kind{};
    int V = 1;        // virtual stages (interleaved schedule)
    int n_micro = 1;  // micro-batches per step
    int64_t n_apps = 0;
    StageExtras extras;
    std::vector<int64_t> partition;  // layer applications per (virtual) stage
    int slots = 1;                   // model instances per chunk: micro-batches in flight
};

void Trainer::build_model_and_optimizer() {
    const TrainingArgs& t = job_.training;
    const bool tensor = opts_.tp_comm && opts_.tp_comm->size() > 1;
    EngineSpec spec = engine_spec();
    // Tensor parallelism rides on the pipeline executor (a single stage when
    // pp is 1): it already builds models for a placement, gathers rows into
    // global tensors for checkpoints and owns the global grad norm.
    const bool pipeline = spec.pipelined();
    Backend* stack = choose_stack_device();
    spec.dp_options.buffers = stack_dp_.get();
    spec.pp_buffers = stack_pp_.get();
    if (stack) {
        // The CPU keeps f32 activations and rounds GEMM operands; a GPU
        // keeps activations, the compute copy and gradients in the compute type.
        stack_.be = stack;
        stack_.act = stack->device() == Device::cpu ? DType::f32 : compute_dtype();
    }
    // Pipeline stages build only their part (build_engines); the whole model
    // is built when evaluation or export first needs it (ensure_full_model).
    if (!pipeline) {
        ModelPlacement place;
        place.device = stack_;
        model_ = build_model(config_, place);
        load_or_init(*model_);
        model_->set_compute_dtype(compute_dtype());
    }
    note_memory_options();
    if (t.fp16) {
        scaler_ = std::make_unique<DynamicLossScale>(opts_.loss_scale);
        state_.loss_scale = scaler_->scale();
    }
    // Without oneDNN bf16 kernels bf16 keeps its numerics but not its speed: say so once.
    const bool cpu = stack == nullptr || stack->device() == Device::cpu;
    if (cpu && t.bf16 && gemm_bf16_route() == Bf16Impl::widen_f32)
        load_notes_.push_back(
            "bf16: this CPU has no bf16 GEMM kernels in oneDNN (needs AVX-512); operands are "
            "rounded to bf16 and multiplied in fp32: same numerics, no speed gain");
    build_engines(std::move(spec), tensor);
    plan_schedule();
}

// The layout's step engine, built once by parallel/step_engines.h, and the
// notes on what this rank holds.
void Trainer::build_engines(EngineSpec spec, bool tensor) {
    const bool pipeline = spec.pipelined();
    std::optional<PipelineShape> shape;
    if (pipeline) {
        shape = pipeline_shape();
        spec.schedule = shape->kind;
        spec.virtual_stages = shape->V;
        std::vector<std::unique_ptr<Model>> models = build_stage_models(*shape, tensor);
        load_or_init(*models[0]);  // the stage's rows only; the other instances share them
        for (auto& m : models) spec.stage_models.push_back(std::move(m));
    } else {
        spec.model = model_.get();
    }
    engines_ = build_step_engines(std::move(spec));
    if (pipeline) note_pipeline_layout(*shape, tensor);
    if (DataParallel* dp = engines_->data_parallel()) note_data_parallel(*dp);
}

// The job's groups and options as the engine factory reads them (the
// pipeline's schedule comes with its shape).
EngineSpec Trainer::engine_spec() const {
    EngineSpec spec;
    spec.dp = opts_.dp_comm;
    spec.pp = opts_.pp_comm;
    spec.tp = opts_.tp_comm;
    spec.dp_options = dp_options_for(job_.distribution);
    spec.optimizer = optimizer_config(job_.training);
    return spec;
}

// The job's weights, or a fresh initialisation for pretraining.
void Trainer::load_or_init(Model& m) {
    const TrainingArgs& t = job_.training;
    if (!job_.model.weights_path.empty()) {
        const LoadReport rep =
            m.load(SafetensorsFile::open(job_.model.weights_path), uint64_t(t.seed));
        for (const auto& n : rep.newly_initialised)
            load_notes_.push_back("newly initialised (not in the checkpoint): " + n);
    } else {
        m.init(uint64_t(t.seed));
        load_notes_.push_back("no weights given: parameters initialised for pretraining");
    }
}

Backend* Trainer::choose_stack_device() {
    const auto several = [](const Communicator* c) { return c && c->size() > 1; };
    const bool data = several(opts_.dp_comm), tensor = several(opts_.tp_comm),
               stages = several(opts_.pp_comm);
    // The same answer on every rank, but for the device itself (below).
    if (!opts_.stack_device || job_.training.use_cpu) return nullptr;
    if ((data || tensor || stages) && !opts_.make_stack_group) {
        load_notes_.push_back(
            "training on the CPU: data, tensor and pipeline parallelism on GPUs reduce over "
            "NCCL, which this build or launch lacks (hyperparameters.use_cpu: true silences "
            "this)");
        return nullptr;
    }
    Backend* be = opts_.stack_device();
    // The slices of one model post its collectives together, and stages hand
    // activations to each other, and every group below is made collectively:
    // the whole job on the device or none of it (a rank that stopped alone
    // would leave the others waiting in a collective).
    const auto agree = [be](Communicator& group, const char* what) {
        double n = be ? 1.0 : 0.0;
        group.all_reduce(&n, 1, DType::f64, ReduceOp::sum)->wait();
        LOOM_CHECK(n == 0 || int(n) == group.size(),
                   "{} of the {} ranks of this {} job can train on a GPU (rank {}: {}); give "
                   "every rank a GPU, or set hyperparameters.use_cpu: true",
                   int(n), group.size(), what, group.rank(), be ? "yes" : "no");
    };
    if ((tensor || stages) && opts_.world_comm)
        agree(*opts_.world_comm, stages ? "pipeline-parallel" : "tensor-parallel");
    else if (tensor)
        agree(*opts_.tp_comm, "tensor-parallel");
    if (data) replicas_agree_on_gpu(be != nullptr, "");
    // DataParallel (tensor parallelism's one-stage layout has one, over a dp
    // group of one rank) reduces the table's buffers over the dp group's
    // twin: a CPU group neither reaches device memory nor moves bf16 and fp16.
    if (be && (data || tensor || stages))
        stack_dp_ = opts_.make_stack_group(*opts_.dp_comm);  // collective over dp
    // The activations' all-reduces go over the tp group's twin, its
    // scalars over the group itself.
    if (be && tensor) stack_tp_ = opts_.make_stack_group(*opts_.tp_comm);  // collective over tp
    // The stages' activations and the shared rows' sums go over the pp
    // group's twin.
    if (be && stages) stack_pp_ = opts_.make_stack_group(*opts_.pp_comm);  // collective over pp
    if (!be) return nullptr;
    load_notes_.push_back(training_on_note(be->name()));
    return be;
}

// Activation checkpointing on the whole model (pipeline stages set it as
// they are built), and the notes for both activation options.
void Trainer::note_memory_options() {
    const DistributionArgs& dist = job_.distribution;
    if (dist.activation_checkpointing) {
        if (model_)
            model_->set_activation_checkpointing(std::max<int64_t>(dist.checkpoint_every, 1));
        load_notes_.push_back(fmt::format(
            "activation checkpointing: every {} layer application(s) recompute in backward",
            std::max<int64_t>(dist.checkpoint_every, 1)));
    }
    if (!dist.offload_activations) return;
    if (!offloads()) {
        load_notes_.push_back(
            "offload_activations: on CPU the checkpointed inputs already live in host memory, so "
            "there is nothing to move");
        return;
    }
    if (model_) model_->set_activation_offloading(true, dist.activation_loading_horizon);
    load_notes_.push_back(fmt::format(
        "offload_activations: the checkpointed layer inputs go to host memory after forward and "
        "come back before backward on a second stream, at most {} of them on the device at a "
        "time (activation_loading_horizon + 1; at least 2 when every layer is checkpointed)",
        dist.activation_loading_horizon + 1));
}

bool Trainer::offloads() const {
    const DistributionArgs& d = job_.distribution;
    return d.offload_activations && d.activation_checkpointing && stack_.be != nullptr &&
           !stack_.be->host_addressable();
}

Trainer::PipelineShape Trainer::pipeline_shape() const {
    const TrainingArgs& t = job_.training;
    LOOM_CHECK(opts_.dp_comm != nullptr && opts_.pp_comm != nullptr,
               "pipeline and tensor parallelism need the dp and pp groups");
    const DistributionArgs& d = job_.distribution;
    // LAMB's trust ratio needs each tensor's whole norm; a tensor-parallel
    // slice holds part of it. Pipeline stages hold whole tensors.
    LOOM_CHECK(t.optim != OptimizerKind::lamb || !opts_.tp_comm || opts_.tp_comm->size() == 1,
               "{}: hyperparameters.optim lamb under tensor parallelism: its per-tensor trust "
               "ratios would need norms summed over the tensor-parallel slices, which Loom does "
               "not do yet; use adamw or sgd with tensor_parallel_degree > 1",
               job_.source);
    PipelineShape s;
    s.P = opts_.pp_comm->size();
    s.stage = opts_.pp_comm->rank();
    s.kind = d.pipeline;
    s.V = s.kind == ScheduleKind::interleaved ? int(d.virtual_stages) : 1;
    LOOM_CHECK(s.V == 1 || d.partition.empty(),
               "{}: distribution.partition with pipeline: interleaved is not supported; "
               "leave it out (even split over pipeline_parallel_degree x virtual_stages)",
               job_.source);
    s.n_micro = int(t.gradient_accumulation_steps * d.microbatches);
    const std::string bad = schedule_check(s.kind, s.P, s.n_micro, s.V);
    LOOM_CHECK(bad.empty(),
               "{}: distribution: {} (micro-batches per step = "
               "gradient_accumulation_steps x microbatches = {})",
               job_.source, bad, s.n_micro);
    s.n_apps = model_layer_applications(config_);
    LOOM_CHECK(s.n_apps >= int64_t(s.P) * s.V,
               "{}: {} pipeline stages x {} virtual stages need at least that many layer "
               "applications; the model has {}",
               job_.source, s.P, s.V, s.n_apps);
    // Stages balanced by compute unless the job gives a partition: the
    // last stage's head (GPT-2's LM head costs several layers) counts.
    s.extras = pipeline_stage_extras(config_, job_.data.max_seq_length, job_.data.mlm_probability);
    s.partition =
        d.partition.empty() ? balanced_partition(s.n_apps, s.P * s.V, s.extras) : d.partition;
    s.slots = schedule_max_in_flight(s.kind, s.P, s.stage, s.n_micro, s.V);
    return s;
}

// One model instance per micro-batch in flight and chunk; the instances
// after the first use its buffers from the start.
std::vector<std::unique_ptr<Model>> Trainer::build_stage_models(const PipelineShape& s,
                                                                bool tensor) const {
    const DistributionArgs& dist = job_.distribution;
    ModelPlacement place;
    if (tensor)
        place.tp =
            ModelTp{opts_.tp_comm->rank(), opts_.tp_comm->size(), opts_.tp_comm, stack_tp_.get()};
    place.device = stack_;
    std::vector<std::unique_ptr<Model>> models;
    for (int k = 0; k < s.slots * s.V; ++k) {
        place.part = pipeline_chunk_part(s.n_apps, s.P, s.V, s.stage, k / s.slots, s.partition);
        if (k > 0) place.part.share_with = &models[0]->params();
        auto m = build_model(config_, place);
        m->set_compute_dtype(compute_dtype());
        if (dist.activation_checkpointing)
            m->set_activation_checkpointing(std::max<int64_t>(dist.checkpoint_every, 1));
        if (offloads()) m->set_activation_offloading(true, dist.activation_loading_horizon);
        m->set_logits_scope(LogitsScope::labelled_positions);
        models.push_back(std::move(m));
    }
    return models;
}

// What this rank holds under pipeline and tensor parallelism, for the log.
void Trainer::note_pipeline_layout(const PipelineShape& s, bool tensor) {
    const DistributionArgs& d = job_.distribution;
    PipelineParallel& pp = *engines_->pipeline();
    std::string layers;
    for (int c = 0; c < s.V; ++c) {
        const ModelPart p = pipeline_chunk_part(s.n_apps, s.P, s.V, s.stage, c, s.partition);
        layers += fmt::format("{}[{}, {}){}{}", c ? ", " : "", p.app_begin, p.app_end,
                              p.embeddings ? " + embeddings" : "", p.head ? " + head" : "");
    }
    load_notes_.push_back(fmt::format(
        "pipeline stage {} of {}: layer applications {}, {} of {} parameters, {} model "
        "instance(s) per chunk for the micro-batches in flight ({} schedule, {} "
        "micro-batches per step)",
        s.stage, s.P, layers, pp.model().params().num_local_parameters(),
        pp.model().params().num_parameters(), s.slots, schedule_kind_name(s.kind), s.n_micro));
    if (s.P > 1 && stack_.be && stack_.be->device() == Device::cuda)
        load_notes_.push_back(fmt::format(
            "pipeline on GPUs: the model stack's stages on {}, their activations and gradients "
            "in {} over NCCL",
            stack_.be->name(), dtype_name(stack_.act)));
    std::string sizes;
    for (int64_t n : s.partition) sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ", n);
    load_notes_.push_back(
        d.partition.empty()
            ? fmt::format("layer applications per stage: [{}], balanced by compute (the "
                          "embeddings count as {:.2f} and the head as {:.2f} layer "
                          "applications; distribution.partition overrides)",
                          sizes, s.extras.first, s.extras.last)
            : fmt::format("layer applications per stage: [{}] (distribution.partition)", sizes));
    std::string per_stage;
    for (int64_t n : pp.params_per_stage())
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
        load_notes_.push_back(
            (stack_.be && stack_.be->device() == Device::cuda
                 ? "data parallel on GPUs (the model stack's gradients over NCCL): "
                 : "data parallel: ") +
            pp.data_parallel().memory_plan().describe());
}

// Data parallelism (the CPU, or the one stack on GPUs): what DataParallel holds per rank.
void Trainer::note_data_parallel(const DataParallel& dp) {
    const Backend& be = model_->params().backend();
    load_notes_.push_back(
        (be.device() == Device::cuda
             ? "data parallel on GPUs (the model stack's gradients over NCCL while backward runs): "
             : "data parallel: ") +
        dp.memory_plan().describe());
    if (dp.sparse_embedding_grad())
        load_notes_.push_back(
            "data parallel: the word embeddings' lookup gradient is exchanged as rows after "
            "backward, so their table is reduced while backward runs "
            "(distribution.sparse_embedding_grads: false reduces it densely)");
    else if (job_.distribution.sparse_embedding_grads &&
             !model_->params().backend().host_addressable())
        load_notes_.push_back(
            "data parallel: distribution.sparse_embedding_grads has no effect on " +
            model_->params().backend().name() +
            ": the word embeddings' gradient is reduced densely there (the row exchange adds "
            "rows on the host)");
}

// The loader, step plan and schedule (a job without train data has none).
void Trainer::plan_schedule() {
    const TrainingArgs& t = job_.training;
    state_.seed = uint64_t(t.seed);
    state_.data_seed = uint64_t(t.data_seed);
    if (!train_rows_) return;
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

}  // namespace loom
