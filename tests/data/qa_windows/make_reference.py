"""Reference windows, labels and answers for Loom's QA featurizer tests.

Runs Hugging Face's own code on Hugging Face tokenizer output:
  - the windows: tokenizers 0.22.2 (encode_hf.js, truncation only_second with
    stride and overflowing windows), on squad.json's questions (lstripped, as
    run_qa does) and contexts;
  - start/end positions: run_qa.py prepare_train_features, the loop copied
    below as it is written there (character offsets);
  - answers: utils_qa.py postprocess_qa_predictions (copied below, logging and
    file output removed) on seeded random float32 logits, SQuAD v1 and v2.
Usage (from this folder): /usr/bin/python3 make_reference.py
"""
import collections
import json
import subprocess
import tempfile

import numpy as np

TOKENIZER = "../tokenizers/bert-base-uncased/tokenizer.json"
MAX_LENGTH = 48
DOC_STRIDE = 16
N_BEST = 20
MAX_ANSWER_LENGTH = 30
CLS_INDEX = 0  # [CLS] is the first token of every window


def load_examples():
    doc = json.load(open("squad.json", encoding="utf-8"))
    out = []
    for article in doc["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                out.append({"id": qa["id"], "question": qa["question"], "context": para["context"],
                            "answers": {"text": [a["text"] for a in qa["answers"]],
                                        "answer_start": [a["answer_start"] for a in qa["answers"]]}})
    return out


def encode(examples):
    with tempfile.TemporaryDirectory() as d:
        inp, outp = d + "/in.json", d + "/out.json"
        json.dump([{"question": e["question"].lstrip(), "context": e["context"]} for e in examples],
                  open(inp, "w", encoding="utf-8"), ensure_ascii=False)
        subprocess.run(["node", "encode_hf.js", TOKENIZER, inp, outp, str(MAX_LENGTH), str(DOC_STRIDE)],
                       check=True)
        return json.load(open(outp, encoding="utf-8"))


def prepare_train_features(examples, windows):
    # run_qa.py prepare_train_features, pad_on_right = True.
    pad_on_right = True
    features = []
    for sample_index, example_windows in enumerate(windows):
        for w in example_windows:
            input_ids = w["ids"]
            offsets = w["offsets"]
            sequence_ids = [None if s < 0 else s for s in w["sequence_ids"]]
            cls_index = CLS_INDEX
            answers = examples[sample_index]["answers"]
            if len(answers["answer_start"]) == 0:
                start, end = cls_index, cls_index
            else:
                start_char = answers["answer_start"][0]
                end_char = start_char + len(answers["text"][0])
                token_start_index = 0
                while sequence_ids[token_start_index] != (1 if pad_on_right else 0):
                    token_start_index += 1
                token_end_index = len(input_ids) - 1
                while sequence_ids[token_end_index] != (1 if pad_on_right else 0):
                    token_end_index -= 1
                if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
                    start, end = cls_index, cls_index
                else:
                    while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                        token_start_index += 1
                    start = token_start_index - 1
                    while offsets[token_end_index][1] >= end_char:
                        token_end_index -= 1
                    end = token_end_index + 1
            features.append({"example_index": sample_index, "example_id": examples[sample_index]["id"],
                             "input_ids": input_ids, "token_type_ids": w["type_ids"],
                             "sequence_ids": w["sequence_ids"], "offsets_chars": offsets,
                             "start_position": start, "end_position": end,
                             # prepare_validation_features: None outside the context.
                             "offset_mapping": [o if sequence_ids[k] == 1 else None for k, o in enumerate(offsets)]})
    return features


def postprocess_qa_predictions(examples, features, predictions, version_2_with_negative=False,
                               n_best_size=20, max_answer_length=30, null_score_diff_threshold=0.0):
    # utils_qa.py postprocess_qa_predictions.
    all_start_logits, all_end_logits = predictions
    example_id_to_index = {k: i for i, k in enumerate(examples["id"])}
    features_per_example = collections.defaultdict(list)
    for i, feature in enumerate(features):
        features_per_example[example_id_to_index[feature["example_id"]]].append(i)
    all_predictions = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()
    for example_index, example in enumerate(examples["rows"]):
        feature_indices = features_per_example[example_index]
        min_null_prediction = None
        prelim_predictions = []
        for feature_index in feature_indices:
            start_logits = all_start_logits[feature_index]
            end_logits = all_end_logits[feature_index]
            offset_mapping = features[feature_index]["offset_mapping"]
            token_is_max_context = features[feature_index].get("token_is_max_context", None)
            feature_null_score = start_logits[0] + end_logits[0]
            if min_null_prediction is None or min_null_prediction["score"] > feature_null_score:
                min_null_prediction = {"offsets": (0, 0), "score": feature_null_score,
                                       "start_logit": start_logits[0], "end_logit": end_logits[0]}
            start_indexes = np.argsort(start_logits)[-1 : -n_best_size - 1 : -1].tolist()
            end_indexes = np.argsort(end_logits)[-1 : -n_best_size - 1 : -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if (start_index >= len(offset_mapping) or end_index >= len(offset_mapping)
                            or offset_mapping[start_index] is None or len(offset_mapping[start_index]) < 2
                            or offset_mapping[end_index] is None or len(offset_mapping[end_index]) < 2):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    if token_is_max_context is not None and not token_is_max_context.get(str(start_index), False):
                        continue
                    prelim_predictions.append({
                        "offsets": (offset_mapping[start_index][0], offset_mapping[end_index][1]),
                        "score": start_logits[start_index] + end_logits[end_index],
                        "start_logit": start_logits[start_index], "end_logit": end_logits[end_index]})
        if version_2_with_negative and min_null_prediction is not None:
            prelim_predictions.append(min_null_prediction)
            null_score = min_null_prediction["score"]
        predictions = sorted(prelim_predictions, key=lambda x: x["score"], reverse=True)[:n_best_size]
        if (version_2_with_negative and min_null_prediction is not None
                and not any(p["offsets"] == (0, 0) for p in predictions)):
            predictions.append(min_null_prediction)
        context = example["context"]
        for pred in predictions:
            offsets = pred.pop("offsets")
            pred["text"] = context[offsets[0] : offsets[1]]
        if len(predictions) == 0 or (len(predictions) == 1 and predictions[0]["text"] == ""):
            predictions.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        scores = np.array([pred.pop("score") for pred in predictions])
        exp_scores = np.exp(scores - np.max(scores))
        probs = exp_scores / exp_scores.sum()
        for prob, pred in zip(probs, predictions):
            pred["probability"] = prob
        if not version_2_with_negative:
            all_predictions[example["id"]] = predictions[0]["text"]
        else:
            i = 0
            while predictions[i]["text"] == "":
                i += 1
            best_non_null_pred = predictions[i]
            score_diff = null_score - best_non_null_pred["start_logit"] - best_non_null_pred["end_logit"]
            scores_diff_json[example["id"]] = float(score_diff)
            if score_diff > null_score_diff_threshold:
                all_predictions[example["id"]] = ""
            else:
                all_predictions[example["id"]] = best_non_null_pred["text"]
    return all_predictions, scores_diff_json


def main():
    examples = load_examples()
    windows = encode(examples)
    features = prepare_train_features(examples, windows)
    rng = np.random.default_rng(1234)
    start = [rng.standard_normal(len(f["input_ids"])).astype(np.float32) for f in features]
    end = [rng.standard_normal(len(f["input_ids"])).astype(np.float32) for f in features]
    # Make the null answer win outright for the unanswerable question.
    for i, f in enumerate(features):
        if f["example_id"] == "danube-7":
            start[i][0] += np.float32(4.0)
            end[i][0] += np.float32(4.0)
    ex = {"id": [e["id"] for e in examples], "rows": examples}
    v1, _ = postprocess_qa_predictions(ex, features, (start, end), False, N_BEST, MAX_ANSWER_LENGTH)
    _, diff0 = postprocess_qa_predictions(ex, features, (start, end), True, N_BEST, MAX_ANSWER_LENGTH, 0.0)
    # A threshold between the diffs, so some answers are null and some not.
    threshold = float(np.median(sorted(diff0.values())))
    threshold = float(np.float32(threshold) + np.float32(1e-3))
    v2, diff = postprocess_qa_predictions(ex, features, (start, end), True, N_BEST, MAX_ANSWER_LENGTH,
                                          threshold)
    for f in features:
        del f["offset_mapping"]
    ref = {
        "tokenizer": "bert-base-uncased",
        "max_length": MAX_LENGTH, "doc_stride": DOC_STRIDE,
        "n_best_size": N_BEST, "max_answer_length": MAX_ANSWER_LENGTH,
        "features": features,
        "start_logits": [[float(x) for x in s] for s in start],
        "end_logits": [[float(x) for x in e] for e in end],
        "predictions_v1": v1, "predictions_v2": v2, "null_score_diff_threshold_v2": threshold,
        "null_score_diff_v2": diff,
    }
    with open("reference.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
