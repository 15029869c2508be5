#!/usr/bin/env python3
"""Writes the tiny, deterministic data sets the trainer's end-to-end tests use.

Classification: a sentence is "animal" or "food" (or "weather") by the nouns
it contains, so a two-layer model learns it in a few dozen steps. QA: the
answer is the name that follows "named" in the context. LM: plain sentences.
Run from this folder: python3 make_data.py (outputs are committed).
"""
import json
import random

rng = random.Random(1234)
topics = {
    "animal": ["cat", "dog", "horse", "bird", "fish", "mouse", "lion", "tiger"],
    "food": ["bread", "cheese", "apple", "soup", "rice", "cake", "wine", "butter"],
    "weather": ["rain", "snow", "wind", "storm", "sun", "cloud", "fog", "frost"],
}
fillers = ["the", "a", "my", "old", "big", "small", "good", "bad", "is", "was", "very",
           "today", "and", "with", "near", "house", "man", "woman", "city"]


def sentence(topic):
    words = [rng.choice(fillers) for _ in range(rng.randint(3, 9))]
    for _ in range(rng.randint(1, 3)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(topics[topic]))
    return " ".join(words).capitalize() + "."


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


labels = list(topics)
write("cls_train.jsonl", [{"text": sentence(l), "label": l}
                          for l in (rng.choice(labels) for _ in range(192))])
write("cls_eval.jsonl", [{"text": sentence(l), "label": l}
                         for l in (rng.choice(labels) for _ in range(48))])

names = ["Anna", "Peter", "Maria", "John", "Paul", "Laura", "Tom", "Clara"]


def qa_row(i):
    name = rng.choice(names)
    pre = " ".join(rng.choice(fillers) for _ in range(rng.randint(2, 12)))
    post = " ".join(rng.choice(fillers) for _ in range(rng.randint(2, 12)))
    context = f"{pre.capitalize()} a {rng.choice(topics['animal'])} named {name} {post}."
    start = context.index(" named ") + len(" named ")
    return {"id": f"q{i}", "question": "What is the name of the animal?", "context": context,
            "answers": {"text": [name], "answer_start": [start]}}


write("qa_train.jsonl", [qa_row(i) for i in range(96)])
write("qa_eval.jsonl", [qa_row(1000 + i) for i in range(24)])

write("lm_train.jsonl", [{"text": sentence(rng.choice(labels))} for _ in range(160)])
write("lm_eval.jsonl", [{"text": sentence(rng.choice(labels))} for _ in range(32)])
