// DataArgs -> ReadOptions: what the record readers need from a job. Here, in
// train/, because config/ and data/ do not know each other.
#pragma once

#include "config/job.h"
#include "data/record.h"

namespace loom {

inline RecordKind record_kind_for(Task task) {
    switch (task) {
        case Task::sequence_classification: return RecordKind::classification;
        case Task::question_answering: return RecordKind::qa;
        case Task::masked_lm:
        case Task::causal_lm:
        case Task::base: return RecordKind::text;
    }
    return RecordKind::text;
}

inline ReadOptions read_options_for(const Job& job) {
    const DataArgs& d = job.data;
    ReadOptions o;
    o.kind = record_kind_for(job.task);
    o.text_column = d.text_column;
    o.text_pair_column = d.text_pair_column;
    o.label_column = d.label_column;
    o.label_map = d.label_map;
    if (job.task == Task::causal_lm && !d.prompt_column.empty()) {
        o.kind = RecordKind::prompt_completion;
        o.text_column = d.prompt_column;
        o.text_pair_column = d.completion_column;
    }
    o.question_column = d.question_column;
    o.context_column = d.context_column;
    o.answers_column = d.answers_column;
    o.id_column = d.id_column;
    o.sample_by = d.sample_by;
    o.skip_bad_lines = d.skip_bad_lines;
    return o;
}

}  // namespace loom
