// The job's data section becomes the readers' options field for field.
#include <gtest/gtest.h>

#include "config/job_test_util.h"
#include "train/read_options.h"

namespace loom {
namespace {

TEST(ReadOptionsFor, CopiesTheDataSection) {
    Job job = test::parse_job(std::string(test::k_min_job) +
                              "  text_column: sentence1\n  text_pair_column: sentence2\n"
                              "  label_column: gold\n  label_map: {0: no, 1: yes}\n"
                              "  skip_bad_lines: true\n");
    ReadOptions o = read_options_for(job);
    EXPECT_EQ(o.kind, RecordKind::classification);
    EXPECT_EQ(o.text_column, "sentence1");
    EXPECT_EQ(o.text_pair_column, "sentence2");
    EXPECT_EQ(o.label_column, "gold");
    EXPECT_EQ(o.label_map, job.data.label_map);
    EXPECT_TRUE(o.skip_bad_lines);
    Job lm = test::parse_job("model: m\ntask: causal-lm\ndata: {train: t.txt, sample_by: paragraph}\n");
    EXPECT_EQ(read_options_for(lm).kind, RecordKind::text);
    EXPECT_EQ(read_options_for(lm).sample_by, SampleBy::paragraph);
    EXPECT_EQ(record_kind_for(Task::question_answering), RecordKind::qa);
    EXPECT_EQ(record_kind_for(Task::masked_lm), RecordKind::text);
}

}  // namespace
}  // namespace loom
