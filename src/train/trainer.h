// Trainer: `loom train job.yaml` from data on disk to an HF model folder.
//
// One optimizer step (train_step):
//   1. fetch the step's gradient_accumulation_steps micro-batches;
//   2. total = labelled tokens/samples over all of them and all
//      data-parallel replicas (ReplicaSync::sum);
//   3. forward + backward each with loss_scale = 1 / total, so any split of
//      the global batch gives the same update; under data parallelism the
//      gradient buckets are reduced while backward runs (DataParallel);
//   4. clip by the global norm over all replicas, optimizer update with the
//      schedule's rate (ZeRO: sharded), log.
// Dropout is keyed by (seed, step, site, global sample index), masks and
// shuffles by (data_seed, epoch, sample), so (step, loader position) is the
// whole RNG state and a resumed run repeats the uninterrupted run's losses.
//
// The trainer knows the Model interface and the task, never a model family.
// Around the loop: evaluation (eval_strategy), checkpoints (save_strategy,
// rotation by save_total_limit that keeps the best), early stopping,
// load_best_model_at_end, SIGTERM/SIGINT/SIGUSR1 (finish the step, checkpoint, stop),
// metrics.jsonl, TensorBoard events, a progress bar, report.html, and the
// final HF export of output_dir.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/job.h"
#include "config/step_plan.h"
#include "data/features.h"
#include "data/loader.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "optim/lr_schedule.h"
#include "parallel/step_engines.h"
#include "train/evaluate.h"
#include "train/hub_push.h"
#include "train/train_state.h"

namespace loom {

class JsonlLogger;
struct MemoryPlan;
class TensorBoardWriter;
class ProgressBar;
struct ReadOptions;
struct Throughput;

// How replicas agree (data parallelism). The default is one process: every
// call is the identity. A Communicator-backed implementation all-reduces.
class ReplicaSync {
  public:
    virtual ~ReplicaSync() = default;
    virtual int64_t dp_rank() const { return 0; }
    virtual int64_t dp_size() const { return 1; }
    // Sum of a scalar over replicas (loss sums, token counts, stop flags).
    virtual double sum(double local) { return local; }
    // Every replica must run the same job on the same data: throws, naming
    // the rank that differs, when the fingerprints disagree.
    virtual void check_same(uint64_t /*fingerprint*/, const std::string& /*what*/) {}
    // The rank that writes files and prints (world rank 0).
    virtual bool is_main() const { return dp_rank() == 0; }
    // True on every rank of the job (all axes) when any rank's flag is set:
    // stop decisions.
    virtual bool any(bool flag) { return sum(flag ? 1.0 : 0.0) > 0; }
    // Largest value over every rank of the job (measured peaks).
    virtual double max_over_job(double local) { return local; }
};

class Communicator;
struct MicroBatch;

struct TrainerOptions {
    ReplicaSync* sync = nullptr;  // null: one process (or dp_comm's replicas)
    // The data-parallel group (mpirun, srun): with more than one rank the
    // trainer runs DataParallel over it (distribution: zero_stage,
    // bucket_size_mb, overlap_comm). Null: one process.
    Communicator* dp_comm = nullptr;
    // Pipeline parallelism: the pp group (more than one rank: this rank runs
    // one stage, distribution.pipeline / microbatches) and the whole job's
    // communicator (stop decisions, which rank is main). Null: no pipeline.
    Communicator* pp_comm = nullptr;
    Communicator* world_comm = nullptr;
    // Tensor parallelism: the tp group (more than one rank: the stage models
    // hold this rank's slice of every column/row-parallel linear; the step
    // then runs through the pipeline executor, with one stage when pp_comm
    // has one rank, which pp_comm must then be). Null: no tensor parallelism.
    Communicator* tp_comm = nullptr;
    std::FILE* out = stdout;     // plain messages
    bool quiet = false;          // no progress bar or messages (tests)
    // Honour stop requests (core/stop_signals.h: SIGTERM, SIGINT, SIGUSR1):
    // finish the step, checkpoint, return StopReason::interrupted.
    bool handle_signals = true;
    // Tests: behave as if SIGTERM arrived during this step (1-based), -1 = never.
    int64_t interrupt_at_step = -1;
    std::string job_text;          // the resolved job (report.html); "" = job_to_yaml
    bool evaluation_only = false;  // `loom eval`: output_dir is neither checked nor touched
    LossScaleOptions loss_scale;   // fp16: GradScaler's defaults
    // The device the model stack trains on (models/, nn/ over a Backend: a
    // CUDA backend on this rank's GPU, set by `loom train` in a CUDA build
    // when one is visible), unless hyperparameters.use_cpu. Null: the CPU.
    // The same engines step it as on the CPU (SingleStep, DataParallel with
    // ZeRO-0/1/2, PipelineParallel for tp and pp), with AdamW, LAMB or SGD
    // in fp32, bf16 or fp16.
    std::function<Backend*()> stack_device;
    // The twin of a CPU group that reduces stack_device's memory (NCCL on its
    // stream); collective over the group: the dp group's carries the
    // gradients, the tp group's the activations, the pp group's the stages'
    // messages. Null: data-, tensor- and pipeline-parallel jobs train on the
    // CPU.
    std::function<std::unique_ptr<Communicator>(Communicator&)> make_stack_group;
};

enum class StopReason { completed, interrupted, early_stopped };

struct TrainResult {
    StopReason stop = StopReason::completed;
    int64_t global_step = 0;
    int64_t start_step = 0;           // > 0 when resumed
    std::vector<double> step_losses;  // mean loss of each step run here, in order
    std::vector<std::pair<std::string, double>> final_metrics;  // eval_* of the last evaluation
    std::string last_checkpoint;                                // "" when none was written
    std::string best_checkpoint;
    double train_runtime_s = 0;
    double data_wait_s = 0;           // time the loop waited for batches
    int64_t samples = 0, tokens = 0;  // processed in this run
    int64_t skipped_steps = 0;        // fp16: updates skipped for inf/NaN gradients (whole run)
    int stop_signal = 0;              // interrupted: the signal the ranks agreed to stop on
};

class RemoteJob;

class Trainer {
  public:
    // Validates what can be validated cheaply first (output_dir writable,
    // which checkpoint to resume and whether it is this job's, the tokenizer
    // and config readable), then reads and featurizes the data and builds the
    // model; then resumes, or clears the old run for overwrite_output_dir
    // (trainer_restart.cpp).
    explicit Trainer(Job job, TrainerOptions options = {});
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    TrainResult train();
    // Evaluates the current model on the eval channel (an error when there is none).
    EvalOutput evaluate(bool keep_outputs = false);

    Model& model() { return *model_; }
    // The model this rank trains: its stage's or tensor-parallel slice, or
    // the whole one.
    Model& train_model();
    const ModelConfig& model_config() const { return config_; }
    const StepPlan& plan() const { return plan_; }
    const TrainState& state() const { return state_; }
    const FeatureSet* train_data() const { return train_.get(); }
    const FeatureSet* eval_data() const { return eval_.get(); }
    // Exports the current model as an HF folder (output_dir at the end of train()).
    void export_model(const std::string& dir);

  private:
    // trainer_restart.cpp: a fresh start or the same job's newest checkpoint
    void check_output_dir();
    void choose_start();
    int64_t find_checkpoint(std::string& where);
    // "same job", or why it could not be checked; a difference throws when
    // `strict`, else becomes a note.
    std::string check_same_job(const std::string& dir, const std::string& where, bool strict);
    void clear_previous_run();
    // trainer_setup.cpp
    void load_tokenizer_and_config();
    void choose_export_dtype();
    void read_data();
    std::vector<std::string> initial_label_names() const;
    std::shared_ptr<const FeatureSet> load_channel(const std::string& where, const char* channel,
                                                   const ReadOptions& ro, FeaturizeOptions& fo);
    void fit_label_count(const std::vector<std::string>& names);
    std::shared_ptr<const RowSource> open_train_shards(const std::string& dir);
    LoaderOptions loader_options(int64_t batch_size, bool shuffle) const;
    // trainer_model.cpp: the model, optimizer, step engine and schedule
    struct PipelineShape;
    void build_model_and_optimizer();
    void load_or_init(Model& m);
    void note_memory_options();
    EngineSpec engine_spec() const;
    void build_engines(EngineSpec spec, bool tensor);
    PipelineShape pipeline_shape() const;
    std::vector<std::unique_ptr<Model>> build_stage_models(const PipelineShape& s,
                                                           bool tensor) const;
    void note_pipeline_layout(const PipelineShape& s, bool tensor);
    void note_data_parallel(const DataParallel& dp);
    void plan_schedule();
    // trainer.cpp
    double train_step(int64_t step, TokenBatch* scratch, double* grad_norm);
    void log_train(int64_t step, double loss, double grad_norm, double lr);
    void run_evaluation(int64_t step);
    bool early_stop_check();
    MemoryPlan memory_plan(bool checkpointing) const;
    // trainer_loop.cpp: train()'s pieces
    // The progress bar's rates: over the steps since `since` seconds into
    // the run (restarted every 20 steps).
    struct StepWindow {
        std::chrono::steady_clock::time_point run_start;
        double since = 0;
        int64_t samples = 0, tokens = 0, steps = 0;
    };
    void say(const std::string& s) const;  // a plain message, main rank only, unless quiet
    void open_run_outputs(bool resumed);
    MemoryPlan announce_run(bool resumed);
    void check_replicas_agree();
    int agreed_stop(int64_t gs);
    int run_steps(TrainResult& r, const MemoryPlan& mem, std::chrono::steady_clock::time_point t0,
                  bool& stop_early);
    void report_first_step(const MemoryPlan& mem);
    bool advance_data_position();
    void log_step(int64_t gs, double loss, double grad_norm, bool epoch_end, StepWindow& window);
    bool eval_due(int64_t gs, bool epoch_end, bool last) const;
    void report_interrupted(TrainResult& r, int stop_signal);
    // trainer_checkpoint.cpp
    using Metrics = std::vector<std::pair<std::string, double>>;
    void finish_run(TrainResult& r, double runtime_s);
    void gather_final_state(TrainResult& r);
    Metrics final_evaluation();
    std::string write_run_report(const TrainResult& r, const Throughput& tp, double wait_share,
                                 const Metrics& final_metrics);
    std::string save_checkpoint();
    void resume(const std::string& dir);
    void load_best_model();
    void update_best(const std::string& checkpoint_name);
    std::string best_metric_key() const;
    bool improves(double value, std::optional<double> best) const;

    Job job_;
    TrainerOptions opts_;
    ReplicaSync local_sync_;
    std::unique_ptr<ReplicaSync> comm_sync_;
    ReplicaSync* sync_;
    // Builds model_ (the whole model) if a pipeline stage has not yet.
    Model& ensure_full_model();
    // Collective on pp: the stages' rows into model_, on every rank or (for
    // export) only on the main one.
    void refresh_full_model(bool all_ranks = true);
    // The whole model's parameters from gathered rows (by HF name).
    void fill_full_model(const std::map<std::string, Tensor>& rows);
    DropoutPlan train_dropout(int64_t step, const TokenBatch& b) const;
    // The step's n batches as the engine runs them; under pipeline
    // parallelism each split into `microbatches` pieces (kept in `pieces`,
    // which the views point into).
    std::vector<MicroBatch> step_micro_batches(int64_t step, TokenBatch* mb, int64_t n,
                                               std::vector<TokenBatch>& pieces) const;
    void count_seen(const TokenBatch& b);  // samples and tokens of a trained micro-batch
    // The backend the model stack trains on for this job, or null (the CPU):
    // see TrainerOptions::stack_device.
    Backend* choose_stack_device();
    // "training on <device> (precision, master weights, optimizer state)...".
    std::string training_on_note(const std::string& device) const;
    // Replicas that chose differently would post different collectives and
    // hang: fails unless every dp rank trains on a GPU or none does (`why`:
    // this rank's reason for not). Collective on dp.
    void replicas_agree_on_gpu(bool gpu, const std::string& why);
    // The pipeline layout (pipeline or tensor parallel), null without one.
    PipelineParallel* pipeline() const { return engines_ ? engines_->pipeline() : nullptr; }
    // Whether this job offloads activations: asked, with checkpointing, on a
    // device whose memory is not the host's (on the CPU they already are).
    bool offloads() const;
    DType compute_dtype() const;
    // Pipeline stages at the end: the whole model's rows, gathered on the
    // main rank only, for the export (no whole Model is built for it).
    std::map<std::string, Tensor> gathered_params_;

    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
    ModelConfig config_;
    // The final model's weight type: hyperparameters.export_dtype, or the
    // type the job's weights came in (choose_export_dtype).
    DType export_dtype_ = DType::f32;
    std::shared_ptr<const FeatureSet> train_, eval_;  // train_ null for a shard folder
    std::shared_ptr<const RowSource> train_rows_;     // what the loader batches
    std::unique_ptr<Model> model_;
    std::unique_ptr<Loader> loader_;
    // Data parallel on the one stack's device: the dp group's twin that
    // reduces its gradients (DpOptions::buffers); outlives engines_.
    std::unique_ptr<Communicator> stack_dp_;
    // Tensor parallel on the one stack's device: the tp group's twin its
    // modules reduce activations over (ModelTp::buffers).
    std::unique_ptr<Communicator> stack_tp_;
    std::unique_ptr<Communicator> stack_pp_;  // the pp group's twin (pipeline stages)
    // Where the one stack's models live (choose_stack_device; the CPU by default).
    ParamDevice stack_;
    // The layout's step engine, built once in build_model_and_optimizer
    // (parallel/step_engines.h), with the optimizer of the host engines.
    // Pipeline parallelism: this rank's stage models live here; model_ is
    // then the whole model, refreshed from the stages for evaluation,
    // checkpoints and export. Declared after model_ and the groups:
    // destroyed first (DataParallel takes its hook back off model_, and
    // reduces over the groups).
    std::unique_ptr<StepEngines> engines_;
    std::unique_ptr<DynamicLossScale> scaler_;  // fp16 only
    std::unique_ptr<RemoteJob> remote_;         // checkpoint_uri / s3:// output_dir
    std::unique_ptr<HubPusher> hub_;            // push_to_hub, main rank only
    std::unique_ptr<LrSchedule> schedule_;
    StepPlan plan_;
    TrainState state_;
    std::vector<std::string> load_notes_;  // newly initialised head rows, data stats
    nlohmann::json identity_;              // train/job_identity.h, saved in every checkpoint
    // choose_start's decision, acted on once the set-up succeeded (a bad job
    // must not cost the previous run its checkpoints).
    std::string resume_dir_;
    bool start_over_ = false;
    std::string resumed_from_;  // the checkpoint folder this run continues, "" when fresh

    std::unique_ptr<JsonlLogger> jsonl_;
    std::unique_ptr<TensorBoardWriter> tb_;
    std::unique_ptr<ProgressBar> progress_;
    // Running sums between logging steps.
    double log_loss_sum_ = 0;
    int64_t log_steps_ = 0;
    int64_t last_saved_step_ = -1;
};

}  // namespace loom
