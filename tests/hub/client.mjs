// The independent side of the Hub tests: the official @huggingface/hub
// client (npm) against the test server.
//   node client.mjs upload   HUB REPO DIR [--private]   every file of DIR as one commit
//   node client.mjs download HUB REPO FILE OUT [REV]    one file, byte for byte
//   node client.mjs branch   HUB REPO NAME              a branch at main
//   node client.mjs commits  HUB REPO                   commit titles, newest first, one a line
//   node client.mjs files    HUB REPO                   every file path at main, one a line
// The token comes from HF_TOKEN.
import { createRepo, uploadFiles, downloadFile, createBranch, listCommits, listFiles } from "@huggingface/hub";
import fs from "node:fs";
import path from "node:path";

const [cmd, hubUrl, name, ...rest] = process.argv.slice(2);
const accessToken = process.env.HF_TOKEN || undefined;
const repo = { type: "model", name };

function walk(dir, prefix = "") {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name), prefix + e.name + "/") : [prefix + e.name]);
}

if (cmd === "upload") {
  const [dir, flag] = rest;
  try {
    await createRepo({ repo, accessToken, hubUrl, private: flag === "--private" });
  } catch (e) {
    if (!String(e.message).includes("already")) throw e;
  }
  const files = walk(dir).map((p) => ({ path: p, content: new Blob([fs.readFileSync(path.join(dir, p))]) }));
  const out = await uploadFiles({ repo, accessToken, hubUrl, files, commitTitle: `upload ${files.length} files` });
  console.log(out.commit.oid);
} else if (cmd === "download") {
  const [file, outPath, revision] = rest;
  const blob = await downloadFile({ repo, accessToken, hubUrl, path: file, revision });
  if (!blob) throw new Error(`${file} not found`);
  fs.writeFileSync(outPath, Buffer.from(await blob.arrayBuffer()));
} else if (cmd === "branch") {
  await createBranch({ repo, accessToken, hubUrl, branch: rest[0] });
} else if (cmd === "commits") {
  for await (const c of listCommits({ repo, accessToken, hubUrl })) console.log(c.title);
} else if (cmd === "files") {
  for await (const f of listFiles({ repo, accessToken, hubUrl, recursive: true })) if (f.type === "file") console.log(f.path);
} else {
  throw new Error("unknown command " + cmd);
}
