// Builds tests/data/tokenizers/components/cases.json: one base tokenizer.json
// from tests/data/tokenizers with one part swapped (a normalizer, a
// pre-tokenizer, a post-processor or a decoder), for every component option
// the bundled real tokenizers do not exercise, with the expected outputs of
// Hugging Face tokenizers 0.22.2 through its Node binding
// (bench/peer/node_modules/@anush008/tokenizers).
//   node tests/tokenizer/make_components_fixture.js
// Each variant is written as {base, override}; the test applies the same
// override to the same base file and must reproduce every field.
const path = require("path");
const fs = require("fs");
const root = path.join(__dirname, "..", "..");
const { Tokenizer } = require(path.join(root, "bench", "peer", "node_modules", "@anush008", "tokenizers"));

const WP = "wordpiece-multilingual-cased";
const BPE = "gpt2";
const UNI = "unigram-albert-style";

const byteLevel = (o = {}) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true, ...o });
const split = (pattern, behavior, invert = false) => ({ type: "Split", pattern, behavior, invert });
const seq = (key, list) => ({ type: "Sequence", [key]: list });

const variants = [
  // Pre-tokenizers.
  ["pre_whitespace", WP, { pre_tokenizer: { type: "Whitespace" } }],
  ["pre_whitespace_split", WP, { pre_tokenizer: { type: "WhitespaceSplit" } }],
  ...["Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"].map((b) =>
    ["pre_punctuation_" + b, WP, { pre_tokenizer: seq("pretokenizers", [{ type: "WhitespaceSplit" }, { type: "Punctuation", behavior: b }]) }]),
  ["pre_digits_individual", WP, { pre_tokenizer: seq("pretokenizers", [{ type: "WhitespaceSplit" }, { type: "Digits", individual_digits: true }]) }],
  ["pre_digits_grouped", WP, { pre_tokenizer: seq("pretokenizers", [{ type: "WhitespaceSplit" }, { type: "Digits", individual_digits: false }]) }],
  ...["Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"].map((b) =>
    ["pre_split_regex_" + b, WP, { pre_tokenizer: split({ Regex: "[,.!?;:]+|\\s+" }, b) }]),
  ["pre_split_string_removed", WP, { pre_tokenizer: split({ String: " " }, "Removed") }],
  ["pre_split_regex_inverted", WP, { pre_tokenizer: split({ Regex: "\\p{L}+|\\p{N}+" }, "Isolated", true) }],
  ["pre_byte_level_prefix_space", BPE, { pre_tokenizer: byteLevel({ add_prefix_space: true }) }],
  ["pre_byte_level_no_regex", BPE, { pre_tokenizer: byteLevel({ use_regex: false }) }],
  ["pre_metaspace_first", UNI, { pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true },
                                 decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true } }],
  ["pre_metaspace_never_nosplit", UNI, { pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "never", split: false },
                                         decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "never", split: false } }],
  // Normalizers.
  ["norm_nfc_lowercase_strip", WP, { normalizer: seq("normalizers", [{ type: "NFC" }, { type: "Lowercase" }, { type: "Strip", strip_left: true, strip_right: true }]) }],
  ["norm_strip_left_only", WP, { normalizer: { type: "Strip", strip_left: true, strip_right: false } }],
  ["norm_nfkc", WP, { normalizer: { type: "NFKC" } }],
  ["norm_nfkd_strip_accents", WP, { normalizer: seq("normalizers", [{ type: "NFKD" }, { type: "StripAccents" }]) }],
  ["norm_nfd_strip_accents_lowercase", WP, { normalizer: seq("normalizers", [{ type: "NFD" }, { type: "StripAccents" }, { type: "Lowercase" }]) }],
  ["norm_prepend", UNI, { normalizer: { type: "Prepend", prepend: "\u2581" },
                          pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "never", split: true } }],
  ["norm_replace_string", WP, { normalizer: { type: "Replace", pattern: { String: "ck" }, content: "KK" } }],
  ["norm_replace_regex_grow", WP, { normalizer: { type: "Replace", pattern: { Regex: "[aeiou]" }, content: "<>" } }],
  ["norm_bert_no_lowercase_no_chinese", WP, { normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: false, strip_accents: null, lowercase: false } }],
  ["norm_bert_strip_accents_only", WP, { normalizer: { type: "BertNormalizer", clean_text: false, handle_chinese_chars: true, strip_accents: true, lowercase: false } }],
  // Post-processors.
  ["post_bert_processing", WP, { post_processor: { type: "BertProcessing", sep: ["[SEP]", 102], cls: ["[CLS]", 101] } }],
  ["post_roberta_trim", BPE, { pre_tokenizer: byteLevel({ add_prefix_space: false }),
                               post_processor: { type: "RobertaProcessing", sep: ["<|endoftext|>", 50256], cls: ["<|endoftext|>", 50256], trim_offsets: true, add_prefix_space: false } }],
  ["post_roberta_no_trim", BPE, { pre_tokenizer: byteLevel({ add_prefix_space: true }),
                                  post_processor: { type: "RobertaProcessing", sep: ["<|endoftext|>", 50256], cls: ["<|endoftext|>", 50256], trim_offsets: false, add_prefix_space: true } }],
  ["post_byte_level_trim", BPE, { post_processor: byteLevel({ trim_offsets: true }) }],
  ["post_byte_level_prefix_trim", BPE, { pre_tokenizer: byteLevel({ add_prefix_space: true }), post_processor: byteLevel({ trim_offsets: true, add_prefix_space: true }) }],
  ["post_sequence_byte_level_template", BPE, { post_processor: seq("processors", [byteLevel({ trim_offsets: true }), {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<|endoftext|>": { id: "<|endoftext|>", ids: [50256], tokens: ["<|endoftext|>"] } } }]) }],
  // Decoders.
  ["dec_wordpiece_no_cleanup", WP, { decoder: { type: "WordPiece", prefix: "##", cleanup: false } }],
  ["dec_sequence_replace_strip_fuse", WP, { decoder: seq("decoders", [{ type: "Replace", pattern: { String: "##" }, content: "" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }]) }],
  // (HF's Strip panics when one token would lose more characters than it has,
  // e.g. "s" with start 1 and stop 1; the cases avoid that.)
  ["dec_strip_chars", UNI, { decoder: seq("decoders", [{ type: "Strip", content: "\u2581", start: 1, stop: 0 }, { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true }]) }],
  ["dec_bpe_decoder_suffix", WP, { decoder: { type: "BPEDecoder", suffix: "##" } }],
];

const texts = [
  ["ascii", "Hello, world! This is a test.", null],
  ["digits", "In 1984 there were 42 cats and 3.14159 pies, call 555-0199.", null],
  ["punctuation_runs", "Wait... what?! (Really) -- yes; no: maybe...", null],
  ["accents", "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m Cafe\u0301", null],
  ["compat", "\uFB01nal \u2460 x\u00B2 \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u212B", null],
  ["cjk_mixed", "\u4E2D\u6587 text \u65E5\u672C\u8A9E mixed", null],
  ["whitespace", "  leading and   inner\tspaces\nand trailing  ", null],
  ["control", "a\u0001b\u00A0c\u200Bd", null],
  ["emoji", "I \u2764\uFE0F tokens \uD83D\uDE00!", null],
  ["empty", "", null],
  ["pair", "Where is the cat?", "The cat sat on the mat in 2024."],
  ["pair_punct", "Is it 3.5 or 4?", "It's 3.5, obviously!"],
];

const nullIds = (a) => a.map((w) => (w === undefined ? null : w));

async function main() {
  const out = [];
  for (const [name, base, override] of variants) {
    const spec = JSON.parse(fs.readFileSync(path.join(root, "tests", "data", "tokenizers", base, "tokenizer.json"), "utf8"));
    Object.assign(spec, override);
    spec.truncation = null;
    spec.padding = null;
    const tok = Tokenizer.fromString(JSON.stringify(spec));
    const cases = [];
    for (const [id, text, pair] of texts) {
      const enc = await tok.encode(text, pair, { addSpecialTokens: true });
      const offsets = enc.getOffsets();
      const seqIds = nullIds(enc.getSequenceIds());
      cases.push({
        id, text, pair,
        encoding: {
          ids: enc.getIds(), tokens: enc.getTokens(), type_ids: enc.getTypeIds(),
          attention_mask: enc.getAttentionMask(), special_tokens_mask: enc.getSpecialTokensMask(),
          offsets, word_ids: nullIds(enc.getWordIds()), sequence_ids: seqIds,
        },
        decoded: await tok.decode(enc.getIds(), true),
        decoded_with_special_tokens: await tok.decode(enc.getIds(), false),
      });
    }
    out.push({ name, base, override, cases });
  }
  const file = path.join(root, "tests", "data", "tokenizers", "components", "cases.json");
  // One line per case keeps the file small and its diffs readable.
  const lines = out.map((v) => ` {"name": ${JSON.stringify(v.name)}, "base": ${JSON.stringify(v.base)}, "override": ${JSON.stringify(v.override)}, "cases": [\n  ` +
    v.cases.map((c) => JSON.stringify(c)).join(",\n  ") + "]}");
  fs.writeFileSync(file, `{"generator": "tokenizers 0.22.2 via @anush008/tokenizers (Node); tests/tokenizer/make_components_fixture.js",\n` +
    `"offsets_note": "offsets: Unicode code points of the sequence's own text (what the binding reports; UTF-8 byte offsets are not derivable from them for tokens that split a character, so they are not recorded here)",\n"variants": [\n` +
    lines.join(",\n") + "\n]}\n");
  console.log(`wrote ${out.length} variants x ${texts.length} cases to ${file}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
