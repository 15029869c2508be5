// The `distribution` block: three ways of writing it, one DistributionArgs.
//
//   {smdistributed: {dataparallel: {enabled: true}}}        SageMaker DDP
//   {smdistributed: {modelparallel: {enabled: true,         SageMaker model parallel (SMP)
//                     parameters: {pipeline_parallel_degree: 2, ...}}}}
//   {data_parallel_degree: 2, zero_stage: 1, ...}           Loom's own keys
//
// plus SageMaker's launcher blocks `mpi` and `torch_distributed`. Loom keys
// and SMP parameters may be combined; a setting written both ways must agree
// (the error names both places), and so must SMP's two names for one setting
// (partitions and pipeline_parallel_degree). SMP parameters that change
// nothing here (optimize, skip_tracing, ...) are accepted, listed in
// ignored_keys, and each leaves a note saying why; ones whose meaning Loom
// cannot honour (horovod, prescaled_batch, sharded data parallelism) are
// errors rather than silently different training. The `mpi` block is checked
// against the ranks actually started (config/launch_check.h).
#include <algorithm>
#include <set>

#include "config/job_sections.h"

namespace loom::config {

namespace {

const char* const k_dist = "distribution";
constexpr std::string_view k_no_ddp_choice =
    "data-parallel traffic goes over MPI (NCCL on GPUs, set up through MPI), so there is no "
    "port or backend to choose";
constexpr std::string_view k_mpi_options_not_applied =
    "loom launch passes them to mpirun; ranks started another way (mpirun or srun directly) "
    "are already running, so give them to that mpirun yourself";

std::vector<Field> loom_fields(DistributionArgs& d) {
    auto partition = [&d](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        d.partition.clear();
        if (n.IsNull()) return;
        if (n.IsScalar() && (n.Scalar() == "uniform" || n.Scalar() == "even")) return;
        if (!n.IsSequence())
            c.fail(p, n,
                   fmt::format("{}: expected a list of transformer blocks per pipeline "
                               "stage (e.g. [7, 5]) or 'uniform', got {}",
                               p, describe(n)));
        for (size_t i = 0; i < n.size(); ++i)
            d.partition.push_back(read_int(c, n[i], fmt::format("{}[{}]", p, i)));
    };
    return {field_int("data_parallel_degree", &d.data_parallel_degree),
            field_int("zero_stage", &d.zero_stage),
            field_number("bucket_size_mb", &d.bucket_size_mb),
            field_bool("overlap_comm", &d.overlap_comm),
            field_bool("sparse_embedding_grads", &d.sparse_embedding_grads),
            field_int("tensor_parallel_degree", &d.tensor_parallel_degree),
            field_int("pipeline_parallel_degree", &d.pipeline_parallel_degree),
            field_int("microbatches", &d.microbatches),
            field_enum("pipeline", &d.pipeline),
            field_int("virtual_stages", &d.virtual_stages),
            field_string("placement_strategy", &d.placement_strategy),
            field_bool("activation_checkpointing", &d.activation_checkpointing),
            field_int("checkpoint_every", &d.checkpoint_every),
            field_bool("offload_activations", &d.offload_activations),
            field_int("activation_loading_horizon", &d.activation_loading_horizon),
            {"partition", partition},
            field_number("collective_timeout_s", &d.collective_timeout_s),
            field_bool("auto", &d.auto_layout),
            // A profile name, or a YAML file resolved like the job's other paths.
            {"machine",
             [&d](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                 d.machine = read_string(c, n, p);
                 if (d.machine.ends_with(".yaml") || d.machine.ends_with(".yml"))
                     d.machine = c.resolve_path(p, d.machine);
             }},
            field_int("max_tensor_parallel_degree", &d.max_tensor_parallel_degree),
            field_int("max_pipeline_parallel_degree", &d.max_pipeline_parallel_degree)};
}

// Sets a DistributionArgs member from an SMP parameter, unless the same
// setting was written as a Loom key with a different value.
template <class T>
void set_from_smp(const YamlCtx& ctx, const std::string& loom_key, const std::string& smp_path,
                  T* member, const T& value) {
    const std::string loom_path = join_path(k_dist, loom_key);
    if (ctx.has(loom_path) && !(*member == value))
        ctx.fail_key(smp_path, fmt::format("{} disagrees with {} ({})", smp_path, loom_path,
                                           ctx.where(loom_path, ctx.seen_keys.at(loom_path))));
    *member = value;
}

void read_smp_parameters(const YamlCtx& ctx, const YAML::Node& node, const std::string& path,
                         DistributionArgs& d, TrainingArgs& training) {
    auto int_to = [&](std::string_view loom_key, int64_t* member) {
        return
            [&ctx, loom_key, member](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                set_from_smp(ctx, std::string(loom_key), p, member, read_int(c, n, p));
            };
    };
    auto bool_to = [&](std::string_view loom_key, bool* member) {
        return
            [&ctx, loom_key, member](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                set_from_smp(ctx, std::string(loom_key), p, member, read_bool(c, n, p));
            };
    };
    // Accepted for compatibility, read with its type so typos still fail,
    // and noted with the reason it changes nothing.
    enum class Type { boolean, integer, string };
    auto ignored = [&d](Type type, std::string_view why) {
        return [&d, type, why](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
            if (type == Type::boolean) read_bool(c, n, p);
            if (type == Type::integer) read_int(c, n, p);
            if (type == Type::string) read_string(c, n, p);
            d.ignored_keys.push_back(p);
            c.notes.push_back(
                fmt::format("{}: '{}' has no effect in Loom: {}", p, n.Scalar(), why));
        };
    };
    auto optimize = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string v = read_string(c, n, p);
        if (v != "speed" && v != "memory")
            c.fail(p, n, fmt::format("{}: expected 'speed' or 'memory', got '{}'", p, v));
        ignored(Type::string,
                "its tensor parallelism has one layout, SMP's 'speed' (LayerNorms and their "
                "activations kept whole on every tensor-parallel rank)")(c, n, p);
    };
    auto must_be_false = [](std::string_view why) {
        return [why](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
            if (read_bool(c, n, p)) c.fail(p, n, fmt::format("{}: not supported: {}", p, why));
        };
    };
    auto pipeline = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        std::string s = read_string(c, n, p);
        // SMP's "interleaved" interleaves forward and backward passes: 1F1B.
        ScheduleKind k;
        if (s == "simple")
            k = ScheduleKind::simple;
        else if (s == "interleaved" || s == "1f1b")
            k = ScheduleKind::one_f_one_b;
        else
            c.fail(p, n, fmt::format("{}: expected 'simple' or 'interleaved', got '{}'", p, s));
        set_from_smp(ctx, "pipeline", p, &d.pipeline, k);
    };
    auto ddp = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        // Without ddp SMP runs no data-parallel replicas.
        int64_t degree = read_bool(c, n, p) ? 0 : 1;
        if (degree == 0 && ctx.has(join_path(k_dist, "data_parallel_degree"))) return;
        set_from_smp(ctx, "data_parallel_degree", p, &d.data_parallel_degree, degree);
    };
    auto shard_optimizer_state = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const bool shard = read_bool(c, n, p);
        const std::string zero = join_path(k_dist, "zero_stage");
        if (ctx.has(zero) && shard != (d.zero_stage > 0))
            c.fail(
                p, n,
                fmt::format("{}: {} disagrees with {}: {} ({}); SMP's optimizer-state "
                            "sharding is ZeRO stage 1: keep one of them",
                            p, shard, zero, d.zero_stage, ctx.where(zero, ctx.seen_keys.at(zero))));
        if (shard && d.zero_stage == 0) d.zero_stage = 1;
    };
    auto sharded_dp = [](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        if (read_int(c, n, p) > 1)
            c.fail(p, n,
                   fmt::format("{}: sharded data parallelism (ZeRO-3) is not supported; use "
                               "distribution.zero_stage 1 or 2",
                               p));
    };
    auto placement = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        set_from_smp(ctx, "placement_strategy", p, &d.placement_strategy, read_string(c, n, p));
    };
    // HF's hyperparameters.fp16 / bf16 and SMP's parameters of the same name
    // are one setting: both given must agree.
    auto precision = [](std::string_view name, bool* flag) {
        return [name, flag](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
            const bool on = read_bool(c, n, p);
            const std::string hp = join_path("hyperparameters", name);
            if (c.has(hp) && *flag != on)
                c.fail(p, n,
                       fmt::format("{}: {} disagrees with {}: {} ({}): keep one of them", p, on, hp,
                                   *flag, c.where(hp, c.seen_keys.at(hp))));
            if (on) *flag = true;
        };
    };
    read_fields(
        ctx, node, path,
        {{"pipeline_parallel_degree",
          int_to("pipeline_parallel_degree", &d.pipeline_parallel_degree)},
         {"partitions", int_to("pipeline_parallel_degree", &d.pipeline_parallel_degree)},
         {"tensor_parallel_degree", int_to("tensor_parallel_degree", &d.tensor_parallel_degree)},
         {"microbatches", int_to("microbatches", &d.microbatches)},
         {"pipeline", pipeline},
         {"placement_strategy", placement},
         {"ddp", ddp},
         {"shard_optimizer_state", shard_optimizer_state},
         {"sharded_data_parallel_degree", sharded_dp},
         {"activation_checkpointing",
          bool_to("activation_checkpointing", &d.activation_checkpointing)},
         {"offload_activations", bool_to("offload_activations", &d.offload_activations)},
         {"activation_loading_horizon",
          int_to("activation_loading_horizon", &d.activation_loading_horizon)},
         {"fp16", precision("fp16", &training.fp16)},
         {"bf16", precision("bf16", &training.bf16)},
         {"horovod", must_be_false("Loom's data parallelism is MPI/NCCL, not Horovod")},
         {"prescaled_batch",
          must_be_false("Loom's batch size is always per data-parallel replica")},
         {"optimize", optimize},
         {"auto_partition", ignored(Type::boolean,
                                    "it always splits the layers over the stages by compute, "
                                    "unless distribution.partition lists the blocks per stage")},
         {"default_partition", ignored(Type::integer,
                                       "it has no smp.partition contexts to place modules in; "
                                       "distribution.partition lists the blocks per stage")},
         {"skip_tracing", ignored(Type::boolean,
                                  "it does not trace the model; the stages are "
                                  "planned from config.json")},
         {"delayed_parameter_initialization",
          ignored(Type::boolean,
                  "each rank already creates only its own parameters (its "
                  "pipeline stage and tensor-parallel slice)")},
         {"active_microbatches",
          ignored(Type::integer,
                  "the pipeline schedule decides how many micro-batches are in "
                  "flight (1f1b: at most one per stage; simple: all of them)")},
         {"ddp_port", ignored(Type::integer, k_no_ddp_choice)},
         {"ddp_dist_backend", ignored(Type::string, k_no_ddp_choice)},
         {"tensor_parallel_seed",
          ignored(Type::integer,
                  "dropout is keyed by hyperparameters.seed and the global "
                  "element index, the same on every tensor-parallel rank, so "
                  "there is no per-rank seed")},
         {"fast_mode", ignored(Type::boolean,
                               "pipeline stages always send hidden states "
                               "straight to the next stage")}});
    // partitions is SMP's older name for pipeline_parallel_degree.
    const std::string ppd = join_path(path, "pipeline_parallel_degree");
    const std::string parts = join_path(path, "partitions");
    if (ctx.has(ppd) && ctx.has(parts)) {
        const int64_t a = read_int(ctx, ctx.seen.at(ppd), ppd);
        const int64_t b = read_int(ctx, ctx.seen.at(parts), parts);
        if (a != b) {
            // Blame the later of the two lines.
            const bool parts_later =
                ctx.seen_keys.at(parts).Mark().line >= ctx.seen_keys.at(ppd).Mark().line;
            const std::string& later = parts_later ? parts : ppd;
            const std::string& earlier = parts_later ? ppd : parts;
            ctx.fail_key(later,
                         fmt::format("{}: {} disagrees with {}: {} ({}); partitions is SMP's "
                                     "older name for pipeline_parallel_degree: keep one of them",
                                     later, parts_later ? b : a, earlier, parts_later ? a : b,
                                     ctx.where(earlier, ctx.seen_keys.at(earlier))));
        }
    }
}

void validate(const YamlCtx& ctx, const DistributionArgs& d) {
    auto at = [&](std::string_view key) { return join_path(k_dist, key); };
    auto bad = [&](std::string_view key, const std::string& msg) {
        ctx.fail_key(at(key), fmt::format("{}: {}", at(key), msg));
    };
    if (d.data_parallel_degree < 0) bad("data_parallel_degree", "must be >= 1 (or 0 = the rest)");
    if (d.zero_stage < 0 || d.zero_stage > 2)
        bad("zero_stage",
            fmt::format("must be 0, 1 or 2, got {} (ZeRO-3 is not supported)", d.zero_stage));
    if (!(d.bucket_size_mb > 0)) bad("bucket_size_mb", "must be > 0");
    if (d.tensor_parallel_degree < 1) bad("tensor_parallel_degree", "must be >= 1");
    if (d.pipeline_parallel_degree < 1) bad("pipeline_parallel_degree", "must be >= 1");
    if (d.microbatches < 1) bad("microbatches", "must be >= 1");
    if (d.virtual_stages < 1) bad("virtual_stages", "must be >= 1");
    if (d.pipeline == ScheduleKind::interleaved) {
        if (d.virtual_stages < 2)
            bad("virtual_stages",
                "pipeline 'interleaved' needs virtual_stages >= 2 model chunks "
                "per rank (use '1f1b' for one chunk)");
        if (d.pipeline_parallel_degree > 1 && d.microbatches % d.pipeline_parallel_degree != 0)
            bad("microbatches",
                fmt::format("pipeline 'interleaved' needs microbatches ({}) to be a multiple of "
                            "pipeline_parallel_degree ({})",
                            d.microbatches, d.pipeline_parallel_degree));
    } else if (d.virtual_stages > 1) {
        bad("virtual_stages", "virtual_stages > 1 needs pipeline: interleaved");
    }
    if (d.max_tensor_parallel_degree < 0) bad("max_tensor_parallel_degree", "must be >= 0");
    if (d.max_pipeline_parallel_degree < 0) bad("max_pipeline_parallel_degree", "must be >= 0");
    // Under auto the planner sets these; a written value would be overwritten.
    for (std::string_view key : {"data_parallel_degree", "tensor_parallel_degree",
                                 "pipeline_parallel_degree", "microbatches", "pipeline",
                                 "virtual_stages", "activation_checkpointing"})
        if (d.auto_layout && ctx.has(at(key)))
            bad(key, "is chosen by distribution.auto; remove it, or bound the choice with "
                     "max_tensor_parallel_degree / max_pipeline_parallel_degree");
    if (!d.auto_layout)
        for (std::string_view key :
             {"machine", "max_tensor_parallel_degree", "max_pipeline_parallel_degree"})
            if (ctx.has(at(key)))
                ctx.notes.push_back(fmt::format(
                    "{}: no effect without distribution.auto: true (it directs the layout "
                    "planner's choice)",
                    at(key)));
    const std::string& ps = d.placement_strategy;
    std::string sorted = ps;
    std::sort(sorted.begin(), sorted.end());
    if (ps != "cluster" && ps != "spread" && sorted != "DPT")
        bad("placement_strategy",
            fmt::format("expected 'cluster', 'spread' or a permutation of D, P, T (e.g. 'PDT'), "
                        "got '{}'",
                        ps));
    if (d.checkpoint_every < 1) bad("checkpoint_every", "must be >= 1");
    if (d.offload_activations && !d.activation_checkpointing)
        bad("offload_activations",
            "needs activation_checkpointing: true (only checkpointed "
            "block inputs are offloaded)");
    if (d.activation_loading_horizon < 1) bad("activation_loading_horizon", "must be >= 1");
    if (!d.partition.empty()) {
        if (static_cast<int64_t>(d.partition.size()) != d.pipeline_parallel_degree)
            bad("partition", fmt::format("has {} entries but pipeline_parallel_degree is {}",
                                         d.partition.size(), d.pipeline_parallel_degree));
        for (int64_t n : d.partition)
            if (n < 1) bad("partition", "every stage needs at least one block");
    }
    if (!(d.collective_timeout_s > 0)) bad("collective_timeout_s", "must be > 0");
}

}  // namespace

void read_distribution(const YamlCtx& ctx, const YAML::Node& node, DistributionArgs& out,
                       TrainingArgs& training) {
    if (node.IsScalar() && node.Scalar() == "auto") {  // `distribution: auto`
        out.auto_layout = true;
        return;
    }
    YAML::Node smdistributed;
    bool dp_enabled = false, mp_enabled = false;
    YAML::Node mp_parameters;
    // SageMaker passes both blocks' options to mpirun; so does loom launch
    // (cli/launch_plan.h). Kept (job_to_yaml) and noted.
    auto mpi_options = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string v = read_optional_string(c, n, p).value_or("");
        if (v.empty()) return;
        out.custom_mpi_options += (out.custom_mpi_options.empty() ? "" : " ") + v;
        c.notes.push_back(
            fmt::format("{}: '{}': {}", p, v, k_mpi_options_not_applied));
    };
    auto smd = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        read_fields(
            c, n, p,
            {{"dataparallel",
              [&](const YamlCtx& c2, const YAML::Node& n2, const std::string& p2) {
                  read_fields(
                      c2, n2, p2,
                      {field_bool("enabled", &dp_enabled), {"custom_mpi_options", mpi_options}});
              }},
             {"modelparallel", [&](const YamlCtx& c2, const YAML::Node& n2, const std::string& p2) {
                  read_fields(c2, n2, p2,
                              {field_bool("enabled", &mp_enabled),
                               {"parameters", [&](const YamlCtx&, const YAML::Node& n3,
                                                  const std::string&) { mp_parameters = n3; }}});
              }}});
    };
    auto mpi = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        read_fields(c, n, p,
                    {field_bool("enabled", &out.mpi_enabled),
                     field_int("processes_per_host", &out.processes_per_host),
                     {"custom_mpi_options", mpi_options}});
        if (out.processes_per_host < 0)
            c.fail_key(join_path(p, "processes_per_host"),
                       fmt::format("{}.processes_per_host: must be >= 1", p));
    };
    auto torch_distributed = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        bool enabled = false;
        read_fields(c, n, p, {field_bool("enabled", &enabled)});
        if (enabled)
            c.notes.push_back(fmt::format(
                "{}.enabled: 'true' has no effect in Loom: ranks are started by loom launch, "
                "mpirun or srun (not torchrun) and talk over MPI, NCCL on GPUs",
                p));
    };
    std::vector<Field> fields = loom_fields(out);
    fields.push_back({"smdistributed", smd});
    fields.push_back({"mpi", mpi});
    fields.push_back({"torch_distributed", torch_distributed});
    read_fields(ctx, node, k_dist, fields);

    if (dp_enabled && mp_enabled)
        ctx.fail_key("distribution.smdistributed",
                     "distribution.smdistributed: enable either dataparallel or modelparallel, "
                     "not both (modelparallel has its own 'ddp' parameter)");
    out.smddp = dp_enabled;
    out.smp = mp_enabled;
    if (mp_parameters.IsDefined()) {
        // Read even when disabled, so typos are caught; apply only when enabled.
        DistributionArgs scratch = out;
        TrainingArgs scratch_training = training;
        DistributionArgs& target = mp_enabled ? out : scratch;
        TrainingArgs& target_training = mp_enabled ? training : scratch_training;
        const size_t notes_before = ctx.notes.size();
        const std::string path = "distribution.smdistributed.modelparallel.parameters";
        read_smp_parameters(ctx, mp_parameters, path, target, target_training);
        if (!mp_enabled) {
            ctx.notes.resize(notes_before);
            if (mp_parameters.IsMap() && mp_parameters.size() > 0)
                ctx.notes.push_back(
                    fmt::format("{}: checked but not applied, because "
                                "distribution.smdistributed.modelparallel.enabled is not true",
                                path));
        }
    }
    validate(ctx, out);
}

std::vector<std::string_view> distribution_key_names() {
    DistributionArgs scratch;
    std::vector<std::string_view> names;
    for (const auto& f : loom_fields(scratch)) names.push_back(f.name);
    for (std::string_view k : {"smdistributed", "mpi", "torch_distributed"}) names.push_back(k);
    return names;
}

}  // namespace loom::config
