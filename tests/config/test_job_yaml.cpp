// Job file parsing: HF defaults, every key kind, --set overrides, and the
// error messages (file:line, key, expected type, nearest valid key).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/job.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;
using test::parse_job;
namespace fs = std::filesystem;

TEST(JobYaml, DefaultsAreHuggingFaces) {
    Job job = parse_job(k_min_job);
    const TrainingArgs& t = job.training;
    // Values from transformers.TrainingArguments.
    EXPECT_EQ(t.learning_rate, 5e-5);
    EXPECT_EQ(t.adam_epsilon, 1e-8);
    EXPECT_EQ(t.adam_beta1, 0.9);
    EXPECT_EQ(t.adam_beta2, 0.999);
    EXPECT_EQ(t.max_grad_norm, 1.0);
    EXPECT_EQ(t.weight_decay, 0.0);
    EXPECT_EQ(t.logging_steps, 500);
    EXPECT_EQ(job.checkpoint.save_steps, 500);
    EXPECT_EQ(t.seed, 42);
    EXPECT_EQ(t.data_seed, 42);
    EXPECT_EQ(t.warmup_steps, 0);
    EXPECT_EQ(t.warmup_ratio, 0.0);
    EXPECT_EQ(t.num_train_epochs, 3.0);
    EXPECT_EQ(t.max_steps, -1);
    EXPECT_EQ(t.per_device_train_batch_size, 8);
    EXPECT_EQ(t.per_device_eval_batch_size, 8);
    EXPECT_EQ(t.gradient_accumulation_steps, 1);
    EXPECT_EQ(t.lr_scheduler_type, LrSchedulerType::linear);
    EXPECT_EQ(t.optim, OptimizerKind::adamw);
    EXPECT_EQ(t.eval_strategy, IntervalStrategy::no);
    EXPECT_EQ(job.checkpoint.save_strategy, IntervalStrategy::steps);
    EXPECT_EQ(job.checkpoint.save_total_limit, 0);
    EXPECT_FALSE(t.load_best_model_at_end);
    EXPECT_TRUE(t.metric_for_best_model.empty());
    EXPECT_FALSE(t.bf16);
    EXPECT_FALSE(t.fp16);
    // Relative paths resolve against the job file's folder (/jobs).
    EXPECT_EQ(t.output_dir, "/jobs/trainer_output");
    EXPECT_EQ(t.logging_dir, "/jobs/trainer_output/runs");
    EXPECT_EQ(job.checkpoint.output_dir, t.output_dir);
    EXPECT_EQ(job.data.train, "/jobs/data/train.jsonl");
    EXPECT_EQ(job.data.max_seq_length, 128);
    EXPECT_EQ(job.data.mlm_probability, 0.15);
    EXPECT_FALSE(job.data.packing);
    EXPECT_EQ(job.model.path, "/jobs/models/bert");
    EXPECT_EQ(job.model.config_path, "/jobs/models/bert/config.json");
    EXPECT_EQ(job.model.tokenizer_path, "/jobs/models/bert/tokenizer.json");
    EXPECT_EQ(job.model.weights_path, "/jobs/models/bert/model.safetensors");
    EXPECT_EQ(job.distribution.tensor_parallel_degree, 1);
    EXPECT_EQ(job.distribution.data_parallel_degree, 0);
}

TEST(JobYaml, FullExampleFromTheDocs) {
    Job job = parse_job(R"(
model: path/to/hf-folder
task: sequence-classification
data:
  train: path/train.jsonl
  eval: path/eval.jsonl
  text_column: text
  text_pair_column: null
  label_column: label
  label_map: {1: negative, 2: negative, 3: neutral, 4: positive, 5: positive}
  max_seq_length: 128
hyperparameters:
  output_dir: out
  num_train_epochs: 3
  per_device_train_batch_size: 16
  learning_rate: 5.0e-5
  eval_strategy: steps
  eval_steps: 500
  save_total_limit: 2
  load_best_model_at_end: true
  metric_for_best_model: f1
distribution: {}
)");
    EXPECT_EQ(job.task, Task::sequence_classification);
    EXPECT_EQ(job.data.eval, "/jobs/path/eval.jsonl");
    EXPECT_TRUE(job.data.text_pair_column.empty());
    ASSERT_EQ(job.data.label_map.size(), 5u);
    EXPECT_EQ(job.data.label_map[0], (std::pair<std::string, std::string>{"1", "negative"}));
    EXPECT_EQ(job.data.label_map[4], (std::pair<std::string, std::string>{"5", "positive"}));
    EXPECT_EQ(job.training.per_device_train_batch_size, 16);
    EXPECT_EQ(job.training.eval_strategy, IntervalStrategy::steps);
    EXPECT_EQ(job.checkpoint.save_total_limit, 2);
    EXPECT_TRUE(job.training.load_best_model_at_end);
    EXPECT_EQ(job.training.metric_for_best_model, "f1");
    EXPECT_TRUE(job.training.greater_is_better);  // f1 does not end in "loss"
    EXPECT_EQ(job.training.output_dir, "/jobs/out");
}

TEST(JobYaml, EveryHyperparameterIsRead) {
    Job job = parse_job(std::string(k_min_job) + R"(
  eval: data/eval.csv
hyperparameters:
  max_steps: 1000
  per_device_eval_batch_size: 32
  gradient_accumulation_steps: 4
  weight_decay: 0.01
  adam_beta1: 0.8
  adam_beta2: 0.98
  adam_epsilon: 1e-6
  max_grad_norm: 0.5
  lr_scheduler_type: polynomial
  lr_scheduler_kwargs: {lr_end: 1.0e-6, power: 2}
  warmup_ratio: 0.1
  warmup_steps: 7
  optim: adamw_torch
  seed: 3
  data_seed: 9
  logging_steps: 10
  save_strategy: epoch
  greater_is_better: false
  early_stopping_patience: 3
  bf16: true
  resume_from_checkpoint: latest
  evaluation_strategy: epoch
checkpoint_uri: s3://bucket/run1
)");
    const TrainingArgs& t = job.training;
    EXPECT_EQ(t.max_steps, 1000);
    EXPECT_EQ(t.per_device_eval_batch_size, 32);
    EXPECT_EQ(t.gradient_accumulation_steps, 4);
    EXPECT_EQ(t.weight_decay, 0.01);
    EXPECT_EQ(t.adam_beta1, 0.8);
    EXPECT_EQ(t.adam_beta2, 0.98);
    EXPECT_EQ(t.adam_epsilon, 1e-6);  // "1e-6" is a number here, unlike PyYAML
    EXPECT_EQ(t.max_grad_norm, 0.5);
    EXPECT_EQ(t.lr_scheduler_type, LrSchedulerType::polynomial);
    EXPECT_EQ(t.lr_end, 1e-6);
    EXPECT_EQ(t.power, 2.0);
    EXPECT_EQ(t.warmup_ratio, 0.1);
    EXPECT_EQ(t.warmup_steps, 7);
    EXPECT_EQ(t.optim, OptimizerKind::adamw);
    EXPECT_EQ(t.seed, 3);
    EXPECT_EQ(t.data_seed, 9);
    EXPECT_EQ(t.logging_steps, 10);
    EXPECT_EQ(job.checkpoint.save_strategy, IntervalStrategy::epoch);
    EXPECT_EQ(t.eval_strategy, IntervalStrategy::epoch);  // via the older alias
    EXPECT_EQ(t.early_stopping_patience, 3);
    EXPECT_EQ(t.metric_for_best_model, "loss");  // needed by early stopping, HF's default
    EXPECT_FALSE(t.greater_is_better);
    EXPECT_TRUE(t.bf16);
    EXPECT_EQ(job.checkpoint.resume_from_checkpoint, "latest");
    EXPECT_EQ(job.checkpoint.checkpoint_uri, "s3://bucket/run1");
}

TEST(JobYaml, UnknownKeyNamesLineAndNearestKey) {
    std::string text = std::string(k_min_job) +
                       "hyperparameters:\n"
                       "  num_train_epochs: 2\n"
                       "  learning_rat: 3e-5\n";
    // learning_rat is on line 7.
    expect_job_error(text, {"job.yaml:7:", "unknown key 'learning_rat' in hyperparameters",
                            "did you mean 'learning_rate'?"});
    // A transposition counts as one edit.
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  lerning_rate: 1\n",
                     {"job.yaml:6:", "did you mean 'learning_rate'?"});
    expect_job_error("model: m\ntask: causal-lm\ndata: {train: t}\nhyperparameter: {}\n",
                     {"job.yaml:4:", "unknown key 'hyperparameter'", "the top level",
                      "did you mean 'hyperparameters'?"});
}

TEST(JobYaml, KeyInTheWrongSectionSaysWhereItBelongs) {
    expect_job_error(std::string(k_min_job) + "  learning_rate: 1e-4\n",
                     {"job.yaml:5:", "unknown key 'learning_rate' in data",
                      "belongs under 'hyperparameters'"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  max_seq_length: 64\n",
                     {"job.yaml:6:", "belongs under 'data'"});
}

TEST(JobYaml, WrongTypesNameLineKeyAndExpectedType) {
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  learning_rate: fast\n",
                     {"job.yaml:6:", "hyperparameters.learning_rate", "expected a number",
                      "'fast'"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  num_train_epochs: [1, 2]\n",
                     {"job.yaml:6:", "hyperparameters.num_train_epochs", "expected a number",
                      "a list"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  max_steps: 2.5\n",
                     {"job.yaml:6:", "hyperparameters.max_steps", "expected an integer"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  bf16: maybe\n",
                     {"job.yaml:6:", "hyperparameters.bf16", "expected true or false"});
    expect_job_error(std::string(k_min_job) + "  text_column: {a: 1}\n",
                     {"job.yaml:5:", "data.text_column", "expected a string", "a map"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  lr_scheduler_type: cosin\n",
                     {"job.yaml:6:", "'cosin' is not a valid value", "did you mean 'cosine'?"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  optim: adafactor\n",
                     {"job.yaml:6:", "'adafactor' is not supported"});
    expect_job_error("model: m\ntask: summarization\ndata: {train: x}\n",
                     {"job.yaml:2:", "task", "'summarization'"});
    expect_job_error("model: m\ntask: causal-lm\ndata: [1, 2]\n",
                     {"job.yaml:3:", "data: expected a map of keys, got a list"});
    // Integers written as floats are still integers; huge counts are not truncated.
    EXPECT_EQ(parse_job(std::string(k_min_job) + "hyperparameters: {max_steps: 1e3}\n")
                  .training.max_steps,
              1000);
}

TEST(JobYaml, SyntaxErrorsDuplicatesAndMissingKeys) {
    expect_job_error("model: m\ntask: [unclosed\n", {"job.yaml:", "YAML syntax error"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  seed: 1\n  seed: 2\n",
                     {"job.yaml:7:", "duplicate key 'hyperparameters.seed'"});
    expect_job_error("task: causal-lm\n", {"missing required key 'model'"});
    expect_job_error("model: m\n", {"missing required key 'task'"});
    expect_job_error("", {"the job is empty"});
    expect_job_error("- a\n- b\n", {"must be a map of keys"});
}

TEST(JobYaml, SetOverridesUseTheSameValidation) {
    Job job = parse_job(k_min_job, {"hyperparameters.learning_rate=3e-5",
                                    "hyperparameters.lr_scheduler_type=cosine",
                                    "data.label_map={0: neg, 1: pos}",
                                    "distribution.zero_stage=1"});
    EXPECT_EQ(job.training.learning_rate, 3e-5);
    EXPECT_EQ(job.training.lr_scheduler_type, LrSchedulerType::cosine);
    ASSERT_EQ(job.data.label_map.size(), 2u);
    EXPECT_EQ(job.data.label_map[1].second, "pos");
    EXPECT_EQ(job.distribution.zero_stage, 1);

    // The later override wins, like repeated command-line flags.
    EXPECT_EQ(parse_job(k_min_job, {"hyperparameters.seed=1", "hyperparameters.seed=2"})
                  .training.seed,
              2);
    test::expect_job_error(k_min_job,
                           {"--set hyperparameters.learning_rat=3e-5",
                            "unknown key 'learning_rat'", "did you mean 'learning_rate'?"},
                           {"hyperparameters.learning_rat=3e-5"});
    test::expect_job_error(k_min_job,
                           {"--set hyperparameters.learning_rate=abc",
                            "hyperparameters.learning_rate: expected a number"},
                           {"hyperparameters.learning_rate=abc"});
    test::expect_job_error(k_min_job, {"--set learning_rate", "expected key=value"},
                           {"learning_rate"});
    test::expect_job_error(k_min_job, {"--set model.config=x", "'model' is 'models/bert'",
                                       "job.yaml:1", "not a map"},
                           {"model.config=x"});
    // Paths from --set resolve against the override base, not the job folder.
    Job moved = parse_job(k_min_job, {"data.eval=e.jsonl", "hyperparameters.output_dir=o"});
    EXPECT_EQ(moved.data.eval, "/cwd/e.jsonl");
    EXPECT_EQ(moved.training.output_dir, "/cwd/o");
    EXPECT_EQ(moved.data.train, "/jobs/data/train.jsonl");
}

TEST(JobYaml, ModelForms) {
    Job scratch = parse_job(
        "model: {config: cfg/config.json, tokenizer: /abs/tokenizer.json}\ntask: causal-lm\n"
        "data: {train: t.txt}\n");
    EXPECT_TRUE(scratch.model.path.empty());
    EXPECT_EQ(scratch.model.config_path, "/jobs/cfg/config.json");
    EXPECT_EQ(scratch.model.tokenizer_path, "/abs/tokenizer.json");
    EXPECT_TRUE(scratch.model.weights_path.empty());  // pretrain from scratch

    Job mixed = parse_job(
        "model: {path: hf, tokenizer: tok/tokenizer.json}\ntask: masked-lm\ndata: {train: t}\n");
    EXPECT_EQ(mixed.model.config_path, "/jobs/hf/config.json");
    EXPECT_EQ(mixed.model.tokenizer_path, "/jobs/tok/tokenizer.json");
    EXPECT_EQ(mixed.model.weights_path, "/jobs/hf/model.safetensors");

    expect_job_error("model: {tokenizer: t.json}\ntask: causal-lm\ndata: {}\n",
                     {"job.yaml:1:", "needs a folder or a 'config'"});
    expect_job_error("model: [a]\ntask: causal-lm\n",
                     {"job.yaml:1:", "expected a Hugging Face folder path, a Hub model id or a map"});
    expect_job_error("model: {confg: c}\ntask: causal-lm\n", {"did you mean 'config'?"});
}

TEST(JobYaml, DefaultsThatDependOnOtherKeys) {
    std::string eval = std::string(k_min_job) + "  eval: e.jsonl\n";
    // HF: eval_steps falls back to logging_steps.
    Job a = parse_job(eval + "hyperparameters: {eval_strategy: steps, logging_steps: 50}\n");
    EXPECT_EQ(a.training.eval_steps, 50);
    // run_qa's max_seq_length is 384; run_clm groups texts.
    Job qa = parse_job("model: m\ntask: question-answering\ndata: {train: squad.json}\n");
    EXPECT_EQ(qa.data.max_seq_length, 384);
    EXPECT_FALSE(qa.data.packing);
    Job clm = parse_job("model: m\ntask: causal-lm\ndata: {train: t.txt}\n");
    EXPECT_TRUE(clm.data.packing);
    Job clm2 = parse_job("model: m\ntask: causal-lm\ndata: {train: t.txt, packing: false}\n");
    EXPECT_FALSE(clm2.data.packing);
    EXPECT_FALSE(clm.data.pack_boundaries);
    Job docs =
        parse_job("model: m\ntask: causal-lm\ndata: {train: t.txt, pack_boundaries: true}\n");
    EXPECT_TRUE(docs.data.packing && docs.data.pack_boundaries);
    // Perplexity: lower is better, although it does not end in "loss".
    Job ppl = parse_job(
        "model: m\ntask: causal-lm\ndata: {train: t, eval: e}\n"
        "hyperparameters: {eval_strategy: epoch, save_strategy: epoch, "
        "load_best_model_at_end: true, metric_for_best_model: eval_perplexity}\n");
    EXPECT_FALSE(ppl.training.greater_is_better);
    // load_best_model_at_end alone selects on the loss.
    Job best = parse_job(eval + "hyperparameters: {eval_strategy: steps, eval_steps: 100, "
                                "save_steps: 300, load_best_model_at_end: true}\n");
    EXPECT_EQ(best.training.metric_for_best_model, "loss");
    EXPECT_FALSE(best.training.greater_is_better);
}

TEST(JobYaml, CrossKeyChecksPointAtTheKey) {
    std::string eval = std::string(k_min_job) + "  eval: e.jsonl\n";
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  eval_strategy: steps\n",
                     {"job.yaml:6:", "eval_strategy", "needs an eval set", "data.eval"});
    expect_job_error(eval + "hyperparameters:\n  eval_strategy: steps\n"
                            "  save_strategy: epoch\n  load_best_model_at_end: true\n",
                     {"job.yaml:9:", "requires the save and eval strategy to match"});
    expect_job_error(eval + "hyperparameters:\n  eval_strategy: steps\n  eval_steps: 200\n"
                            "  save_steps: 500\n  load_best_model_at_end: true\n",
                     {"job.yaml:9:", "round multiple of eval_steps"});
    expect_job_error(eval + "hyperparameters:\n  eval_strategy: epoch\n"
                            "  evaluation_strategy: steps\n",
                     {"job.yaml:8:", "disagrees with eval_strategy"});
    expect_job_error(eval + "hyperparameters:\n  eval_strategy: epoch\n"
                            "  metric_for_best_model: exact_match\n",
                     {"job.yaml:8:", "'exact_match' is not computed for sequence-classification"});
    expect_job_error(std::string(k_min_job) + "hyperparameters: {bf16: true, fp16: true}\n",
                     {"bf16 and fp16"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  logging_steps: 2.5\n",
                     {"job.yaml:6:", "must be an integer when > 1"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  warmup_ratio: 1.5\n",
                     {"job.yaml:6:", "warmup_ratio: must be in [0, 1]"});
    expect_job_error(std::string(k_min_job) + "hyperparameters:\n  per_device_train_batch_size: 0\n",
                     {"job.yaml:6:", "must be >= 1"});
    expect_job_error(std::string(k_min_job) +
                         "hyperparameters:\n  lr_scheduler_type: polynomial\n  learning_rate: 1e-8\n",
                     {"job.yaml:7:", "lr_end"});
    expect_job_error("model: m\ntask: sequence-classification\ndata:\n  train: t\n  packing: true\n",
                     {"job.yaml:5:", "packing"});
    // Document boundaries need packed causal-LM blocks.
    expect_job_error("model: m\ntask: masked-lm\ndata:\n  train: t\n  pack_boundaries: true\n",
                     {"job.yaml:5:", "data.pack_boundaries", "causal-lm, not masked-lm"});
    expect_job_error(
        "model: m\ntask: causal-lm\ndata:\n  train: t\n  packing: false\n  pack_boundaries: true\n",
        {"job.yaml:6:", "data.pack_boundaries", "data.packing is false"});
    expect_job_error("model: m\ntask: masked-lm\ndata:\n  train: t\n  label_map: {a: b}\n",
                     {"job.yaml:5:", "label_map: only applies to sequence-classification"});
    expect_job_error("model: m\ntask: question-answering\ndata:\n  train: t\n  doc_stride: 384\n",
                     {"job.yaml:5:", "doc_stride"});
    expect_job_error("model: m\ntask: masked-lm\ndata:\n  train: t\n  mlm_probability: 1.5\n",
                     {"job.yaml:5:", "mlm_probability"});
    expect_job_error(std::string(k_min_job) + "  label_map: {1: a, 1: b}\n",
                     {"job.yaml:5:", "mapped twice"});
}

TEST(JobYaml, ResumeFromCheckpointForms) {
    auto resume = [](const std::string& v) {
        return parse_job(std::string(k_min_job) + "hyperparameters: {resume_from_checkpoint: " + v +
                         "}\n")
            .checkpoint.resume_from_checkpoint;
    };
    EXPECT_EQ(resume("latest"), "latest");
    EXPECT_EQ(resume("true"), "latest");  // HF's resume_from_checkpoint=True
    EXPECT_EQ(resume("false"), "");
    EXPECT_EQ(resume("null"), "");
    EXPECT_EQ(resume("out/checkpoint-500"), "/jobs/out/checkpoint-500");
}

class JobYamlPaths : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("loom_job_paths_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "hf");
        touch(dir_ / "hf" / "config.json");
        touch(dir_ / "hf" / "tokenizer.json");
        touch(dir_ / "train.jsonl");
    }
    void TearDown() override { fs::remove_all(dir_); }
    static void touch(const fs::path& p) { std::ofstream(p) << "{}\n"; }
    std::string write_job(const std::string& text) {
        auto p = dir_ / "job.yaml";
        std::ofstream(p) << text;
        return p.string();
    }
    fs::path dir_;
};

TEST_F(JobYamlPaths, LoadResolvesAgainstTheJobFolderAndChecksPaths) {
    touch(dir_ / "hf" / "model.safetensors");
    std::string path = write_job("model: hf\ntask: sequence-classification\ndata: {train: train.jsonl}\n");
    Job job = job_load(path);
    EXPECT_EQ(job.model.path, (dir_ / "hf").string());
    EXPECT_EQ(job.data.train, (dir_ / "train.jsonl").string());
    EXPECT_EQ(job.source, path);
}

// `loom eval` reads data.eval only: a job whose training data or checkpoint
// is on another machine still evaluates here, and a missing eval file is
// still named.
TEST_F(JobYamlPaths, EvaluationOnlyLeavesTrainingDataAndResumeUnchecked) {
    touch(dir_ / "hf" / "model.safetensors");
    touch(dir_ / "eval.jsonl");
    const std::string path = write_job(
        "model: hf\ntask: sequence-classification\ndata: {train: gone.jsonl, eval: eval.jsonl}\n"
        "hyperparameters: {resume_from_checkpoint: gone/checkpoint-5}\n");
    test::expect_error([&] { job_load(path); }, {"job.yaml:3:", "training data", "gone.jsonl"});
    JobParseOptions eval_only;
    eval_only.evaluation_only = true;
    EXPECT_EQ(job_load(path, {}, eval_only).data.eval, (dir_ / "eval.jsonl").string());
    test::expect_error([&] { job_load(path, {"data.eval=nowhere.jsonl"}, eval_only); },
                       {"eval data", "nowhere.jsonl", "not found"});
}

TEST_F(JobYamlPaths, MissingFilesAreNamedWithTheirKeyLine) {
    std::string path = write_job("model: hf\ntask: sequence-classification\ndata: {train: train.jsonl}\n");
    // No model.safetensors in hf/.
    test::expect_error([&] { job_load(path); }, {"job.yaml:1:", "weights", "model.safetensors",
                                                 "not found"});
    touch(dir_ / "hf" / "model.safetensors");
    path = write_job("model: hf\ntask: sequence-classification\ndata:\n  train: train.jsonl\n"
                     "  eval: nowhere.jsonl\n");
    test::expect_error([&] { job_load(path); }, {"job.yaml:5:", "eval data", "nowhere.jsonl",
                                                 "not found"});
    path = write_job("model: ./missing_folder\ntask: causal-lm\ndata: {train: train.jsonl}\n");
    test::expect_error([&] { job_load(path); }, {"job.yaml:1:", "missing_folder", "not found"});
    // A bare name that is no folder here reads as a Hub model id, resolved
    // by the command (cli/hub_model.h) rather than refused by the parser.
    path = write_job("model: missing_folder\ntask: causal-lm\ndata: {train: train.jsonl}\n");
    EXPECT_EQ(job_load(path).model.hub_id, "missing_folder");
    test::expect_error([&] { job_load((dir_ / "absent.yaml").string()); },
                       {"absent.yaml", "could not be opened"});
}

}  // namespace
}  // namespace loom
