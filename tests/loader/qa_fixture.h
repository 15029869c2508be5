// The QA reference (tests/data/qa_windows): Hugging Face's windows, run_qa
// labels and postprocess answers, and the matching Loom FeatureSet.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "data/features.h"
#include "data/record.h"
#include "feature_test_util.h"

namespace loom::test {

inline std::string qa_dir() { return std::string(LOOM_TEST_DATA_DIR) + "/qa_windows"; }

inline const nlohmann::json& qa_reference() {
    static const nlohmann::json ref = [] {
        std::ifstream in(qa_dir() + "/reference.json");
        return nlohmann::json::parse(in);
    }();
    return ref;
}

// squad.json read by the SQuAD reader and featurized like the reference.
inline const FeatureSet& qa_features() {
    static const FeatureSet set = [] {
        ReadOptions ro;
        ro.kind = RecordKind::qa;
        const std::vector<Record> recs = read_records(qa_dir() + "/squad.json", ro);
        FeaturizeOptions o;
        o.task = Task::question_answering;
        o.max_seq_length = qa_reference().at("max_length").get<int64_t>();
        o.doc_stride = qa_reference().at("doc_stride").get<int64_t>();
        return featurize(recs, bert_tokenizer(), o);
    }();
    return set;
}

// Code points in s[0, byte).
inline int64_t chars_before(const std::string& s, int64_t byte) {
    int64_t n = 0;
    for (int64_t i = 0; i < byte; ++i)
        if ((static_cast<unsigned char>(s[size_t(i)]) & 0xC0) != 0x80) ++n;
    return n;
}

}  // namespace loom::test
