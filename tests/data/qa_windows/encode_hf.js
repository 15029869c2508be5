// Encodes (question, context) pairs with Hugging Face tokenizers (Rust, via
// the Node binding installed in bench/peer) the way run_qa calls it:
// truncation only_second, max_length, stride, overflowing windows.
//   node encode_hf.js TOKENIZER_JSON IN.json OUT.json MAX_LENGTH STRIDE
// IN: [{question, context}]; OUT: per input, the windows (first + overflowing)
// with ids, type_ids, sequence_ids (null -> -1) and code-point offsets.
const path = require("path");
const fs = require("fs");
const { Tokenizer } = require(path.join(__dirname, "..", "..", "..", "bench", "peer", "node_modules",
                                        "@anush008", "tokenizers"));

function windowOf(e) {
  return {
    ids: e.getIds(),
    type_ids: e.getTypeIds(),
    sequence_ids: e.getSequenceIds().map((s) => (s === null || s === undefined ? -1 : s)),
    offsets: e.getOffsets(),
  };
}

async function main() {
  const [tokPath, inPath, outPath, maxLength, stride] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  tok.setTruncation(Number(maxLength), { strategy: "OnlySecond", stride: Number(stride) });
  const inputs = JSON.parse(fs.readFileSync(inPath, "utf8"));
  const out = [];
  for (const x of inputs) {
    const e = await tok.encode(x.question, x.context);
    out.push([windowOf(e), ...e.getOverflowing().map(windowOf)]);
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
