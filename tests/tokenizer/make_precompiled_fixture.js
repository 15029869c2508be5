// Builds tests/data/tokenizers/precompiled/{tokenizer.json,cases.json} from a
// sentencepiece model (spm_train output) with Hugging Face tokenizers 0.22.2
// through its Node binding (bench/peer/node_modules/@anush008/tokenizers).
//   node make_precompiled_fixture.js SPM_MODEL OUT_DIR
// The tokenizer.json is assembled as HF's SpmConverter does for ALBERT/T5
// (Precompiled charsmap + collapse of repeated spaces, Metaspace, Unigram),
// loaded by the library and saved by it; every expected value is what the
// library returns for that file.
const path = require("path");
const fs = require("fs");
const crypto = require("crypto");
const { Tokenizer } = require(path.join(__dirname, "..", "..", "bench", "peer", "node_modules", "@anush008", "tokenizers"));

// Minimal protobuf reader for sentencepiece's ModelProto (no protobuf dependency).
function readVarint(buf, pos) {
  let v = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos++];
    v |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [v, pos];
    shift += 7n;
  }
}
function fields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const num = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) { let v; [v, pos] = readVarint(buf, pos); out.push({ num, v }); }
    else if (wire === 1) { out.push({ num, b: buf.subarray(pos, pos + 8) }); pos += 8; }
    else if (wire === 5) { out.push({ num, b: buf.subarray(pos, pos + 4) }); pos += 4; }
    else if (wire === 2) { let n; [n, pos] = readVarint(buf, pos); out.push({ num, b: buf.subarray(pos, pos + Number(n)) }); pos += Number(n); }
    else throw new Error("unsupported wire type " + wire);
  }
  return out;
}

const [modelPath, outDir] = process.argv.slice(2);
const model = fs.readFileSync(modelPath);
const vocab = [];
let unkId = 0, charsmap = null, normName = "";
for (const f of fields(model)) {
  if (f.num === 1) {  // SentencePiece {1: piece, 2: score, 3: type}
    let piece = "", score = 0, type = 1;
    for (const g of fields(f.b)) {
      if (g.num === 1) piece = g.b.toString("utf8");
      else if (g.num === 2) score = g.b.readFloatLE(0);
      else if (g.num === 3) type = Number(g.v);
    }
    if (type === 2) unkId = vocab.length;
    vocab.push([piece, score]);
  } else if (f.num === 3) {  // NormalizerSpec {1: name, 2: precompiled_charsmap}
    for (const g of fields(f.b)) {
      if (g.num === 1) normName = g.b.toString("utf8");
      if (g.num === 2) charsmap = Buffer.from(g.b);
    }
  }
}
if (!charsmap) throw new Error("no precompiled_charsmap in " + modelPath);

const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const spec = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer: {
    type: "Sequence",
    normalizers: [
      { type: "Precompiled", precompiled_charsmap: charsmap.toString("base64") },
      { type: "Replace", pattern: { Regex: " {2,}" }, content: " " },
    ],
  },
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
  post_processor: {
    type: "TemplateProcessing",
    single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
    pair: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } },
           { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "</s>", type_id: 1 } }],
    special_tokens: { "</s>": { id: "</s>", ids: [2], tokens: ["</s>"] } },
  },
  decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
  model: { type: "Unigram", unk_id: unkId, vocab, byte_fallback: false },
};

// Inputs chosen to exercise the charsmap: compatibility forms, ligatures,
// combining sequences (grapheme-level lookups), removed control characters,
// whitespace variants, emoji and CJK.
const texts = [
  ["ascii", "Hello world, this is a test."],
  ["fullwidth_latin", "\uFF28\uFF45\uFF4C\uFF4C\uFF4F\u3000\uFF37\uFF4F\uFF52\uFF4C\uFF44\uFF01"],
  ["fullwidth_digits", "\uFF11\uFF12\uFF13\uFF0B\uFF14\uFF15\uFF16\uFF1D\uFF15\uFF17\uFF19"],
  ["ligatures", "\uFB01nal \uFB02ow o\uFB00ice \uFB03x \uFB06ar"],
  ["compat_letters", "\u2460 \u2461 \u2474 \u00BD \u2153 x\u00B2 H\u2082O \u2122 \u2116 \u33A1"],
  ["roman_numerals", "Chapter \u2163 and \u216B and \u2170\u2171"],
  ["halfwidth_katakana", "\uFF76\uFF9E\uFF77\uFF9E \uFF8A\uFF9F\uFF8B\uFF9F \uFF71\uFF72\uFF73"],
  ["katakana_voiced_combining", "\u30AB\u3099\u30AD\u3099 \u304B\u3099"],
  ["combining_acute", "Cafe\u0301 nai\u0308ve re\u0301sume\u0301"],
  ["precomposed_accents", "Caf\u00E9 na\u00EFve r\u00E9sum\u00E9 \u00C5ngstr\u00F6m"],
  ["angstrom_ohm_kelvin", "\u212B \u2126 \u212A"],
  ["stacked_marks", "a\u0301\u0302\u0303\u0304 e\u0323\u0302 o\u0308\u0304"],
  ["hangul", "\uD55C\uAD6D\uC5B4 \u1112\u1161\u11AB \u3131\u314F"],
  ["cjk", "\u4E2D\u6587\u5B57\u7B26 \u65E5\u672C\u8A9E\u306E\u6587\u7AE0"],
  ["cjk_compat", "\uF900\uF901 \u2F00\u2F01 \u3300 \u337F"],
  ["control_chars", "a\u0001b\u0007c\u001Fd\u007Fe\u008Ff"],
  ["tabs_newlines", "one\ttwo\nthree\r\nfour\u000Bfive\u000Csix"],
  ["crlf_only", "\r\n"],
  ["space_variants", "a\u00A0b\u2002c\u2003d\u2009e\u200Af\u202Fg\u205Fh\u3000i"],
  ["zero_width", "a\u200Bb\u200Cc\u200Dd\uFEFFe\u2060f"],
  ["line_separators", "a\u2028b\u2029c\u0085d\u1680e"],
  ["repeated_spaces", "a   b    c \u3000 d"],
  ["emoji", "I \u2764\uFE0F tokens \uD83D\uDE00\uD83D\uDC4D\uD83C\uDFFD \uD83D\uDC68\u200D\uD83D\uDC69\u200D\uD83D\uDC67"],
  ["flags_keycaps", "\uD83C\uDDEF\uD83C\uDDF5 \uD83C\uDDFA\uD83C\uDDF8 1\uFE0F\u20E3 #\uFE0F\u20E3"],
  ["math_alnum", "\uD835\uDC00\uD835\uDC01\uD835\uDC02 \uD835\uDD04 \uD835\uDFCE\uD835\uDFCF"],
  ["enclosed", "\u24B6\u24B7\u24B8 \u3251 \uD83C\uDD30"],
  ["quotes_dashes", "\u201Cquoted\u201D \u2018single\u2019 \u2013 \u2014 \u2026 \u2032"],
  ["arabic_presentation", "\uFEFB \uFDFA \uFEF5"],
  ["devanagari", "\u0928\u092E\u0938\u094D\u0924\u0947 \u0915\u094D\u0937"],
  ["thai", "\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35 \u0E4D\u0E32 \u0E33"],
  ["replacement_char", "bad\uFFFDchar and \u2581 bar"],
  ["long_combining_cluster", "x\u0300\u0301\u0302\u0303\u0304\u0305\u0306 y"],
  ["empty", ""],
  ["only_spaces", "   "],
];

const charToByteOffsets = (s, offs) => {
  // The binding reports offsets in code points (as Python does); also give UTF-8 bytes.
  const cps = Array.from(s);
  const prefix = [0];
  for (const c of cps) prefix.push(prefix[prefix.length - 1] + Buffer.byteLength(c, "utf8"));
  return offs.map(([a, b]) => [prefix[a], prefix[b]]);
};

async function main() {
  const json0 = JSON.stringify(spec);
  const tok0 = Tokenizer.fromString(json0);
  const tmp = path.join(outDir, "tokenizer.json.tmp");
  tok0.save(tmp, true);
  const saved = fs.readFileSync(tmp, "utf8");
  fs.renameSync(tmp, path.join(outDir, "tokenizer.json"));
  const tok = Tokenizer.fromString(saved);
  const norm = tok.getNormalizer();
  const cases = [];
  for (const [id, text] of texts) {
    const enc = await tok.encode(text, null, { addSpecialTokens: true });
    const offsets = enc.getOffsets();
    cases.push({
      id,
      text,
      normalized: norm.normalizeString(text),
      encoding: {
        ids: enc.getIds(),
        tokens: enc.getTokens(),
        offsets,
        offsets_utf8: charToByteOffsets(text, offsets),
        word_ids: enc.getWordIds().map((w) => (w === undefined ? null : w)),
      },
      decoded: await tok.decode(enc.getIds(), true),
    });
  }
  const out = {
    tokenizer: "precompiled",
    generator: "tokenizers 0.22.2 via @anush008/tokenizers 0.6.0 (Node); sentencepiece " + "spm_train 0.1.97 (normalization rule " + normName + ")",
    offsets_note: "offsets: Unicode code points of text; offsets_utf8: UTF-8 bytes",
    tokenizer_json_sha256: crypto.createHash("sha256").update(fs.readFileSync(path.join(outDir, "tokenizer.json"))).digest("hex"),
    cases,
  };
  fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify(out, null, 1) + "\n");
  console.log(`wrote ${cases.length} cases, vocab ${vocab.length}, charsmap ${charsmap.length} bytes (${normName})`);
}
main().catch((e) => { console.error(e); process.exit(1); });
