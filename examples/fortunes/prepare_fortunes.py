#!/usr/bin/env python3
"""Turns Debian's fortune-cookie files into the demo's data.

    prepare_fortunes.py OUT_DIR [--fortunes /usr/share/games/fortunes]

Fortune files hold entries separated by lines with a single '%'; the file name
is the entry's category. Writes, with a fixed 90/10 split per category:
  OUT_DIR/pretrain.txt    one entry per line, every category (masked-LM text;
                          the classification eval entries are left out)
  OUT_DIR/cls_train.jsonl {"text": ..., "label": category} for the CATEGORIES
  OUT_DIR/cls_eval.jsonl  the held-out tenth of those
"""
import argparse
import hashlib
import json
import os
import sys

CATEGORIES = ["computers", "definitions", "politics", "songs-poems"]
PRETRAIN_ONLY = ["people", "cookie", "science", "work", "miscellaneous", "men-women", "wisdom",
                 "platitudes", "art", "literature", "linux", "education", "food", "law",
                 "humorists", "fortunes"]


def entries(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        chunk = []
        for line in f:
            if line.rstrip("\n") == "%":
                text = " ".join(" ".join(chunk).split())
                if text:
                    yield text
                chunk = []
            else:
                chunk.append(line.strip())
        text = " ".join(" ".join(chunk).split())
        if text:
            yield text


def held_out(text):
    # Stable across runs and machines: a tenth of the entries by content hash.
    return hashlib.sha256(text.encode("utf-8")).digest()[0] % 10 == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    a = ap.parse_args()
    missing = [c for c in CATEGORIES if not os.path.exists(os.path.join(a.fortunes, c))]
    if missing:
        sys.exit(f"prepare_fortunes.py: {a.fortunes} lacks {', '.join(missing)}: "
                 "install Debian's fortunes package (apt-get install fortunes)")
    os.makedirs(a.out_dir, exist_ok=True)
    counts = {}
    with open(os.path.join(a.out_dir, "pretrain.txt"), "w", encoding="utf-8") as pre, \
         open(os.path.join(a.out_dir, "cls_train.jsonl"), "w", encoding="utf-8") as tr, \
         open(os.path.join(a.out_dir, "cls_eval.jsonl"), "w", encoding="utf-8") as ev:
        for cat in CATEGORIES + PRETRAIN_ONLY:
            path = os.path.join(a.fortunes, cat)
            if not os.path.exists(path):
                continue
            for text in entries(path):
                if cat in CATEGORIES and held_out(text):
                    ev.write(json.dumps({"text": text, "label": cat}, ensure_ascii=False) + "\n")
                    counts[cat + " eval"] = counts.get(cat + " eval", 0) + 1
                    continue
                pre.write(text + "\n")
                if cat in CATEGORIES:
                    tr.write(json.dumps({"text": text, "label": cat}, ensure_ascii=False) + "\n")
                    counts[cat] = counts.get(cat, 0) + 1
                counts["pretrain"] = counts.get("pretrain", 0) + 1
    print("fortunes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
