// `loom predict` (train/predict.h) on folders the trainer exported: the
// classifier's probabilities and the QA answers equal the trainer's own
// evaluation outputs; masked-LM choices and greedy continuations equal the
// argmax of an independent forward through the Model API; sampling follows
// its seed.
#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "train/predict.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class Predict : public TrainDir {};

TEST_F(Predict, ClassifierScoresAreTheTrainersEvalLogits) {
    Trainer tr(job(job_text("sequence-classification", "out", "  max_steps: 4\n")), quiet());
    tr.train();
    const EvalOutput ev = tr.evaluate(true);
    PredictOptions po;
    po.max_seq_length = 32;  // as the job
    Predictor p(path("out"), po);
    const auto got = p.predict_file(data_path("train/cls_eval.jsonl"));
    ASSERT_EQ(int64_t(got.size()) * ev.num_labels, int64_t(ev.logits.size()));
    const auto& names = tr.model_config().id2label;
    for (size_t i = 0; i < got.size(); ++i) {
        const float* l = ev.logits.data() + i * size_t(ev.num_labels);
        double mx = l[0], sum = 0;
        for (int64_t k = 1; k < ev.num_labels; ++k) mx = std::max(mx, double(l[k]));
        for (int64_t k = 0; k < ev.num_labels; ++k) sum += std::exp(double(l[k]) - mx);
        int64_t best = 0;
        for (int64_t k = 0; k < ev.num_labels; ++k) {
            const double prob = std::exp(double(l[k]) - mx) / sum;
            EXPECT_NEAR(got[i]["scores"][names[size_t(k)]].get<double>(), prob, 1e-5)
                << "record " << i;
            if (l[k] > l[best]) best = k;
        }
        EXPECT_EQ(got[i]["label"], names[size_t(best)]);
    }
}

TEST_F(Predict, AnswersAreTheTrainersEvalPredictions) {
    Trainer tr(job(job_text("question-answering", "out", "  max_steps: 6\n")), quiet());
    tr.train();
    const EvalOutput ev = tr.evaluate(true);
    PredictOptions po;
    po.max_seq_length = 48;  // as the job
    po.doc_stride = 16;
    Predictor p(path("out"), po);
    const auto got = p.predict_file(data_path("train/qa_eval.jsonl"));
    ASSERT_EQ(got.size(), ev.qa_predictions.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i]["answer"], ev.qa_predictions[i].text) << "record " << i;
        EXPECT_EQ(got[i]["id"], tr.eval_data()->examples[i].id);
        if (ev.qa_predictions[i].start_byte >= 0) {
            // ASCII contexts: code points are bytes.
            EXPECT_EQ(got[i]["start"], ev.qa_predictions[i].start_byte);
            EXPECT_EQ(got[i]["end"], ev.qa_predictions[i].end_byte);
        }
    }
}

// The model's logits for `ids` through a freshly loaded model folder.
std::vector<float> forward_logits(const std::string& dir, const std::vector<int64_t>& ids) {
    const ModelConfig c = load_hf_config(dir);
    auto m = build_model(c);
    m->load(SafetensorsFile::open(dir + "/model.safetensors"));
    m->set_logits_scope(LogitsScope::all_positions);
    ModelInputs in;
    in.B = 1;
    in.T = int64_t(ids.size());
    in.input_ids = ids.data();
    m->forward(in, DropoutPlan{});
    const Tensor t = m->outputs().at("logits");
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

int64_t argmax(const float* x, int64_t n) {
    return int64_t(std::max_element(x, x + n) - x);
}

TEST_F(Predict, MaskChoicesAreTheModelsRankedLogits) {
    Trainer tr(job(job_text("masked-lm", "out", "  max_steps: 4\n")), quiet());
    tr.train();
    const std::string rec =
        write("in.jsonl", "{\"text\": \"My bad [MASK] good fog a [MASK] small.\"}\n");
    PredictOptions po;
    po.top_k = 4;
    Predictor p(path("out"), po);
    const auto got = p.predict_file(rec);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0]["masks"].size(), 2u);
    const auto tok = tokenizer::Tokenizer::from_file(path("out/tokenizer.json"));
    const auto enc = tok.encode("My bad [MASK] good fog a [MASK] small.", true);
    const std::vector<int64_t> ids(enc.ids.begin(), enc.ids.end());
    const std::vector<float> logits = forward_logits(path("out"), ids);
    const int64_t V = tr.model_config().vocab_size;
    size_t m = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
        if (ids[t] != int64_t(*tok.token_to_id("[MASK]"))) continue;
        const auto& choices = got[0]["masks"][m++];
        ASSERT_EQ(choices.size(), 4u);
        EXPECT_EQ(choices[0]["id"].get<int64_t>(), argmax(logits.data() + t * size_t(V), V));
        for (size_t k = 1; k < choices.size(); ++k)
            EXPECT_GE(choices[k - 1]["score"].get<double>(), choices[k]["score"].get<double>());
    }
    EXPECT_EQ(m, 2u);
}

TEST_F(Predict, GreedyContinuationFollowsTheArgmaxAndSamplingItsSeed) {
    Trainer tr(job(job_text("causal-lm", "out", "  max_steps: 4\n")), quiet());
    tr.train();
    const std::string rec = write("in.jsonl", "{\"text\": \"My bad with good\"}\n");
    PredictOptions po;
    po.max_new_tokens = 5;
    Predictor p(path("out"), po);
    const auto greedy = p.predict_file(rec);
    // Replay: each generated token is the argmax after the prefix.
    const auto tok = tokenizer::Tokenizer::from_file(path("out/tokenizer.json"));
    const auto enc = tok.encode("My bad with good", false);
    std::vector<int64_t> ids(enc.ids.begin(), enc.ids.end());
    const int64_t V = tr.model_config().vocab_size;
    for (int n = 0; n < 5; ++n) {
        const std::vector<float> l = forward_logits(path("out"), ids);
        ids.push_back(argmax(l.data() + (ids.size() - 1) * size_t(V), V));
    }
    const std::vector<uint32_t> all(ids.begin(), ids.end());
    EXPECT_EQ(greedy[0]["text"], tok.decode(all, true));

    po.sample = true;
    po.top_k = 50;
    po.max_new_tokens = 8;
    std::vector<std::string> texts;
    for (uint64_t seed : {1u, 1u, 2u}) {
        po.seed = seed;
        Predictor s(path("out"), po);
        texts.push_back(s.predict_file(rec)[0]["text"].get<std::string>());
    }
    EXPECT_EQ(texts[0], texts[1]);
    EXPECT_NE(texts[0], texts[2]);
}

// What `loom predict --help` documents: {"question", "context"} records with
// no answers. The tiny model has 64 positions, so the default stride must come
// from the model (HF's 128 cannot overlap a 64-token window).
TEST_F(Predict, QuestionsWithoutAnswersGetSpansOfTheirContext) {
    Trainer tr(job(job_text("question-answering", "out", "  max_steps: 2\n")), quiet());
    tr.train();
    std::string long_context;
    for (int i = 0; i < 30; ++i) long_context += "The small dog was near the old house. ";
    long_context += "A cat named Peter was there.";
    const std::string rec = write(
        "q.jsonl",
        "{\"question\": \"What is the name of the animal?\", \"context\": \"A fish named Peter "
        "was very old.\"}\n"
        "{\"id\": \"q2\", \"question\": \"Who?\", \"context\": \"" +
            long_context + "\"}\n");
    Predictor p(path("out"));
    EXPECT_EQ(p.lengths().max_seq_length, 64);
    EXPECT_EQ(p.lengths().doc_stride, 21);
    const auto got = p.predict_file(rec);
    ASSERT_EQ(got.size(), 2u);
    const std::string contexts[] = {"A fish named Peter was very old.", long_context};
    for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(got[i].dump());
        ASSERT_TRUE(got[i]["start"].is_number_integer());
        const int64_t start = got[i]["start"].get<int64_t>(), end = got[i]["end"].get<int64_t>();
        EXPECT_LE(0, start);
        EXPECT_LT(start, end);
        EXPECT_LE(end, int64_t(contexts[i].size()));
        // ASCII contexts: code points are bytes.
        EXPECT_EQ(got[i]["answer"], contexts[i].substr(size_t(start), size_t(end - start)));
        EXPECT_TRUE(std::isfinite(got[i]["score"].get<double>()));
    }
    EXPECT_FALSE(got[0].contains("id"));
    EXPECT_EQ(got[1]["id"], "q2");
    // The long context took several windows, and the notes say so.
    const auto notes = p.notes();
    ASSERT_EQ(notes.size(), 3u);
    EXPECT_NE(notes[1].find("doc_stride 21"), std::string::npos) << notes[1];
    EXPECT_NE(notes[2].find("1 of 2 contexts"), std::string::npos) << notes[2];
}

TEST_F(Predict, MaskedLmTruncatesTextsLongerThanTheModel) {
    Trainer tr(job(job_text("masked-lm", "out", "  max_steps: 2\n")), quiet());
    tr.train();
    std::string tail;
    for (int i = 0; i < 100; ++i) tail += " good fog";
    const std::string rec = write("in.jsonl",
                                  "{\"text\": \"My bad [MASK] house.\"}\n"
                                  "{\"text\": \"My bad [MASK] house." +
                                      tail + "\"}\n");
    Predictor p(path("out"));
    const auto got = p.predict_file(rec);
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(got[1]["masks"].size(), 1u);
    EXPECT_EQ(got[1]["masks"][0].size(), 5u);  // top_k
    EXPECT_EQ(p.truncated(), 1);
    const auto notes = p.notes();
    ASSERT_EQ(notes.size(), 2u);
    EXPECT_NE(notes[1].find("1 of 2 inputs were longer than max_seq_length 64"), std::string::npos)
        << notes[1];

    // A mask beyond the cut cannot be filled, and the message says why.
    const std::string late = write("late.jsonl", "{\"text\": \"My" + tail + " [MASK].\"}\n");
    expect_train_error([&] { p.predict_file(late); },
                       {"every mask token lies past max_seq_length 64"});
}

TEST_F(Predict, LongPromptsKeepTheirLastTokens) {
    Trainer tr(job(job_text("causal-lm", "out", "  max_steps: 2\n")), quiet());
    tr.train();
    std::string prompt;
    for (int i = 0; i < 80; ++i) prompt += "My bad with good ";
    PredictOptions po;
    po.max_new_tokens = 2;
    Predictor p(path("out"), po);
    EXPECT_EQ(p.lengths().max_seq_length, 64);  // n_positions
    const auto got = p.predict_file(write("in.jsonl", "{\"text\": \"" + prompt + "\"}\n"));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(p.truncated(), 1);
}

}  // namespace
}  // namespace loom::test
