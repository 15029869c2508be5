// Hugging Face tokenizers (the Rust library, through its Node binding
// @anush008/tokenizers) on the same corpus as bench_tokenizer, for
// bench/tokenizer_vs_hf.sh. Prints one line in bench_tokenizer's format.
//   node tokenizers_peer.js TOKENIZER_JSON CORPUS_FILE LABEL
// Threads: TOKENIZERS_PARALLELISM=false (or RAYON_NUM_THREADS=1) for one thread.
const path = require("path");
const fs = require("fs");
const { Tokenizer } = require(path.join(__dirname, "peer", "node_modules", "@anush008", "tokenizers"));

async function main() {
  const [tokPath, corpusPath, label] = process.argv.slice(2);
  const text = fs.readFileSync(corpusPath, "utf8");
  const records = [];
  let cur = [];
  for (const line of text.split("\n")) {
    if (line === "%") {
      if (cur.length) records.push(cur.join(""));
      cur = [];
    } else {
      cur.push(line + "\n");
    }
  }
  if (cur.length && cur.join("") !== "\n") records.push(cur.join(""));
  const bytes = records.reduce((n, r) => n + Buffer.byteLength(r, "utf8"), 0);
  const tok = Tokenizer.fromFile(tokPath);
  await tok.encodeBatch(records.slice(0, 2000));  // warm-up
  const t0 = process.hrtime.bigint();
  const encs = await tok.encodeBatch(records);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  let n = 0;
  for (const e of encs) n += e.getIds().length;
  const threads = process.env.TOKENIZERS_PARALLELISM === "false" ? 1 : require("os").cpus().length;
  console.log(`hf   ${label.padEnd(40)} threads=${String(threads).padEnd(2)} ${(bytes / 1e6 / s).toFixed(2).padStart(8)} MB/s ${(n / s).toFixed(0).padStart(12)} tokens/s  (${n} tokens, ${s.toFixed(3)} s)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
