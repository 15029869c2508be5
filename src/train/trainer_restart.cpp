// Where a run starts. Spot instances, evicted pods and preempted Slurm jobs
// restart the same job file, so one file must both start a run and continue
// it:
//   - resume_from_checkpoint unset: the newest complete checkpoint of the
//     same job (in output_dir, or at checkpoint_uri) is resumed; none starts
//     fresh; another job's is refused, naming what differs (job_identity.h);
//   - `latest`: the same, also when overwrite_output_dir is set;
//   - a path: that checkpoint, which must exist; settings that differ from
//     the run that wrote it are listed, not refused (the way to continue a
//     run with, say, a lower learning rate);
//   - overwrite_output_dir (without resume_from_checkpoint): a fresh start
//     that first removes the previous run's checkpoints (at checkpoint_uri
//     too), TensorBoard events and metrics.jsonl, so two runs never mix.
// The main rank looks, fetches and removes; the others take its choice.
#include <fmt/format.h>

#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "train/job_identity.h"
#include "train/remote_job.h"
#include "train/trainer.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

void Trainer::check_output_dir() {
    const std::string& dir = job_.training.output_dir;
    // Before anything slow: an unwritable output_dir must not cost a training run.
    try {
        check_writable_dir(dir);
    } catch (const Error& e) {
        LOOM_FAIL(
            "output_dir {} is not writable, so nothing could be saved: {}\nHINT: set "
            "hyperparameters.output_dir to a folder you can write to",
            dir, e.what());
    }
}

std::string Trainer::check_same_job(const std::string& dir, const std::string& where, bool strict) {
    const std::string path = (fs::path(dir) / std::string(k_job_identity_file)).string();
    if (!fs::exists(path))
        return "written before job identities were recorded, so its job could not be checked "
               "against this one";
    json saved;
    try {
        saved = json::parse(read_file(path));
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON ({})", path, e.what());
    }
    const std::vector<std::string> diffs = job_identity_differences(saved, identity_, path);
    if (diffs.empty()) return "same job";
    std::string list;
    for (const auto& d : diffs) list += "\n  " + d;
    if (!strict) {
        load_notes_.push_back(
            fmt::format("NOTE: {} was written by a job with other settings; continuing it with "
                        "this job's:{}",
                        dir, list));
        return "settings changed";
    }
    LOOM_FAIL(
        "{} ({}) was written by a different job, so this job does not resume from it:{}\n"
        "HINT: to start this job over, set hyperparameters.overwrite_output_dir: true (it "
        "removes the old run's checkpoints and logs) or use another output_dir; to continue "
        "that checkpoint with this job's settings, set hyperparameters.resume_from_checkpoint: "
        "{}",
        fs::path(dir).filename().string(), where, list, dir);
}

int64_t Trainer::find_checkpoint(std::string& where) {
    const std::string& dir = job_.training.output_dir;
    const std::string fetched = remote_->fetch_for_resume(dir);
    std::vector<std::string> skipped;
    const auto found = newest_complete_checkpoint(dir, &skipped);
    for (const auto& s : skipped)
        load_notes_.push_back("passed over an incomplete checkpoint: " + s);
    if (!found) return -1;
    where = !fetched.empty() && fs::path(found->path).filename() == fetched
                ? "downloaded from " + remote_->checkpoint_uri()
                : "found in output_dir";
    return found->step;
}

void Trainer::choose_start() {
    const std::string& spec = job_.checkpoint.resume_from_checkpoint;
    const std::string& dir = job_.training.output_dir;
    if (!spec.empty() && spec != "latest") {
        LOOM_CHECK(fs::is_directory(spec),
                   "hyperparameters.resume_from_checkpoint: {} is not a checkpoint folder (give "
                   "an existing checkpoint-<step> folder, or `latest` for the newest one if any)",
                   spec);
        const std::string how = check_same_job(spec, "resume_from_checkpoint", false);
        load_notes_.push_back(
            fmt::format("resuming from {} (resume_from_checkpoint; {})", spec, how));
        resume_dir_ = spec;
        return;
    }
    // Auto-resume needs something to train on; `latest` without data.train is
    // resume()'s error.
    const bool look =
        spec == "latest" || (!job_.training.overwrite_output_dir && !job_.data.train.empty());
    std::string where;
    int64_t step = -1;
    // The main rank's outcome as one number every rank can take the maximum
    // of (the others give 0): 0 = none, 1 = it failed, 2 + step = found.
    double outcome = 0;
    std::exception_ptr failed;
    if (look && sync_->is_main()) {
        try {
            step = find_checkpoint(where);
            outcome = step < 0 ? 0.0 : double(step + 2);
        } catch (...) {
            failed = std::current_exception();
            outcome = 1;
        }
    }
    // Every rank of the job takes the main rank's choice (other ranks'
    // listings could differ on storage that is not shared).
    outcome = sync_->max_over_job(outcome);
    if (failed) std::rethrow_exception(failed);
    LOOM_CHECK(outcome != 1,
               "the main rank failed while looking for a checkpoint to resume (its message says "
               "why)");
    step = outcome == 0 ? -1 : int64_t(outcome) - 2;
    if (step < 0) {
        start_over_ = job_.training.overwrite_output_dir;
        if (start_over_)
            load_notes_.push_back(fmt::format("starting fresh (overwrite_output_dir) in {}", dir));
        else
            load_notes_.push_back(fmt::format(
                "starting fresh: no complete checkpoint in {}{}", dir,
                remote_->mirrors_checkpoints() ? " or at " + remote_->checkpoint_uri() : ""));
        return;
    }
    if (!sync_->is_main()) {
        remote_->fetch_for_resume(dir, step);
        where = "found in output_dir";
    }
    const std::string path = (fs::path(dir) / fmt::format("checkpoint-{}", step)).string();
    LOOM_CHECK(fs::is_directory(path),
               "the main rank resumes from {}, which this rank cannot see: every rank reads the "
               "checkpoint it resumes from\nHINT: put output_dir on storage all machines share, "
               "or set checkpoint_uri so each machine downloads it",
               path);
    const std::string how = check_same_job(path, where, true);
    load_notes_.push_back(fmt::format("resuming from checkpoint-{} ({}; {})", step, where, how));
    resume_dir_ = path;
}

void Trainer::clear_previous_run() {
    const TrainingArgs& t = job_.training;
    const int64_t folders = remove_checkpoints(t.output_dir);
    const std::string logs =
        t.logging_dir.empty() ? (fs::path(t.output_dir) / "runs").string() : t.logging_dir;
    int64_t events = 0;
    std::error_code ec;
    if (fs::is_directory(logs, ec)) {
        std::vector<fs::path> doomed;
        for (const auto& e : fs::directory_iterator(logs))
            if (e.is_regular_file() &&
                e.path().filename().string().starts_with("events.out.tfevents."))
                doomed.push_back(e.path());
        for (const auto& p : doomed) {
            fs::remove(p, ec);
            LOOM_CHECK(!ec, "overwrite_output_dir: cannot remove {}: {}", p.string(), ec.message());
            ++events;
        }
    }
    const fs::path metrics = fs::path(t.output_dir) / "metrics.jsonl";
    const bool had_metrics = fs::exists(metrics);
    if (had_metrics) fs::remove(metrics);
    const int64_t remote = remote_->clear_checkpoints();
    if (folders + events + remote == 0 && !had_metrics) return;
    std::string what =
        fmt::format("{} checkpoint folder(s), {} TensorBoard event file(s)", folders, events);
    if (had_metrics) what += ", metrics.jsonl";
    if (remote > 0)
        what += fmt::format(" and {} checkpoint(s) at {}", remote, remote_->checkpoint_uri());
    load_notes_.push_back("overwrite_output_dir: removed the previous run's " + what);
}

}  // namespace loom
