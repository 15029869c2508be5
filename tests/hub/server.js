// A small Hugging Face Hub-compatible server for the tests: the endpoints
// huggingface_hub and @huggingface/hub use to download and to commit, over
// plain HTTP on loopback. State lives in DATA_DIR (state.json + blobs/), so a
// stopped and restarted server keeps its repos.
//
//   node server.js --port P --data DIR [--tokens hf_a,hf_b] [--multipart-chunk BYTES]
//                  [--exit-on-lfs-put N] [--log FILE]
//
// Endpoints:
//   POST /api/repos/create                          {name, organization, private}
//   GET  /api/models/{repo}[/revision/{rev}]        {id, sha, private, siblings: [{rfilename, size}]}
//   POST /api/models/{repo}/preupload/{rev}         uploadMode lfs for *.safetensors,
//                                                   *.bin, *tfevents*, or >= 10 MB
//   POST /api/models/{repo}/branch/{name}           {startingPoint?}
//   GET  /api/models/{repo}/commits/{rev}           [{id, title}], newest first
//   GET  /api/models/{repo}/tree/{rev}              every file, recursively
//   POST /{repo}.git/info/lfs/objects/batch         basic, or multipart past --multipart-chunk
//   PUT  /lfs/{oid}  PUT /lfs/{oid}/part/{n}  POST /lfs/{oid}/complete  GET /lfs/{oid}
//   POST /api/models/{repo}/commit/{rev}            NDJSON: header, file, lfsFile, deletedFile
//   GET|HEAD /{repo}/resolve/{rev}/{path}           regular files inline (ETag = git blob
//                                                   sha1); LFS files 302 to /lfs/{oid} with
//                                                   X-Linked-Etag (sha256) and X-Linked-Size
// Private repos answer 401 without a valid token; writes need one. Not a
// real Hub: no users, no permissions beyond "has a valid token", no xet.
"use strict";
const http = require("http");
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const port = Number(args.port || 0);
const dataDir = args.data;
const tokens = new Set((args.tokens || "").split(",").filter(Boolean));
const multipartChunk = Number(args["multipart-chunk"] || 0);
// Fault injection: the server dies when the Nth LFS PUT arrives, mid-upload.
const exitOnLfsPut = Number(args["exit-on-lfs-put"] || 0);
let lfsPuts = 0;
const blobsDir = path.join(dataDir, "blobs");
fs.mkdirSync(blobsDir, { recursive: true });
const stateFile = path.join(dataDir, "state.json");
const state = fs.existsSync(stateFile) ? JSON.parse(fs.readFileSync(stateFile, "utf8")) : { repos: {} };
const save = () => {
  fs.writeFileSync(stateFile + ".tmp", JSON.stringify(state));
  fs.renameSync(stateFile + ".tmp", stateFile);
};
const log = (...a) => { if (args.log) fs.appendFileSync(args.log, a.join(" ") + "\n"); };

const sha256 = (buf) => crypto.createHash("sha256").update(buf).digest("hex");
const gitSha1 = (buf) => crypto.createHash("sha1").update(`blob ${buf.length}\0`).update(buf).digest("hex");
const isLfsPath = (p, size) => /\.(safetensors|bin|pt|h5|msgpack|zip)$/.test(p) || p.includes("tfevents") || size >= 10 * 1024 * 1024;

function send(res, status, body, headers = {}) {
  const data = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data), ...headers });
  res.end(data);
}
function fail(res, status, message, code) {
  send(res, status, { error: message }, { "X-Error-Message": message, ...(code ? { "X-Error-Code": code } : {}) });
}
function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on("data", (c) => parts.push(c));
    req.on("end", () => resolve(Buffer.concat(parts)));
    req.on("error", reject);
  });
}
function token(req) {
  const m = /^Bearer (.+)$/.exec(req.headers.authorization || "");
  return m ? m[1] : null;
}
function authorized(req) {
  const t = token(req);
  return t !== null && tokens.has(t);
}
// The repo, or a 401/404 already sent.
function repoFor(req, res, id, write) {
  const repo = state.repos[id];
  if (token(req) !== null && !authorized(req)) return fail(res, 401, "Invalid credentials in Authorization header");
  if (!repo || (repo.private && !authorized(req))) {
    return fail(res, 401, "Repository Not Found for url: " + req.url, "RepoNotFound");
  }
  if (write && !authorized(req)) return fail(res, 401, "You must be authenticated to write to " + id);
  return repo;
}
// A branch, a commit id, or a unique prefix of one.
function commitOf(repo, rev) {
  const oid = repo.refs[rev] || (/^[0-9a-f]{40}$/.test(rev) ? rev : null);
  return oid ? repo.commits.find((c) => c.oid === oid) : undefined;
}
function blobPath(oid) {
  if (!/^[0-9a-f]{64}$/.test(oid)) throw new Error("bad oid");
  return path.join(blobsDir, oid);
}
function sendBlob(req, res, file, headers) {
  const size = fs.statSync(file).size;
  const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || "");
  let start = 0, end = size - 1, status = 200;
  if (m) {
    start = Number(m[1]);
    end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
    status = 206;
    headers["Content-Range"] = `bytes ${start}-${end}/${size}`;
  }
  res.writeHead(status, { "Content-Type": "application/octet-stream", "Content-Length": Math.max(0, end - start + 1), "Accept-Ranges": "bytes", ...headers });
  if (req.method === "HEAD" || end < start) return res.end();
  fs.createReadStream(file, { start, end }).pipe(res);
}

async function handle(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  const seg = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  const base = `http://${req.headers.host}`;
  log(req.method, url.pathname);

  if (req.method === "POST" && url.pathname === "/api/repos/create") {
    if (!authorized(req)) return fail(res, 401, "You must be authenticated to create a repo");
    const b = JSON.parse((await readBody(req)).toString());
    const id = b.organization ? `${b.organization}/${b.name}` : `user/${b.name}`;
    if (state.repos[id]) return fail(res, 409, "You already created this model repo");
    const first = { oid: crypto.randomBytes(20).toString("hex"), title: "initial commit", files: {} };
    state.repos[id] = { private: !!b.private, commits: [first], refs: { main: first.oid } };
    save();
    return send(res, 200, { url: `${base}/${id}`, name: id });
  }

  if (seg[0] === "api" && seg[1] === "models") {
    const verbs = ["revision", "preupload", "commit", "commits", "branch", "tree"];
    const k = seg.findIndex((s, i) => i >= 3 && verbs.includes(s));
    const id = seg.slice(2, k < 0 ? seg.length : k).join("/");
    const verb = k < 0 ? "info" : seg[k];
    const rev = k < 0 ? "main" : seg.slice(k + 1).join("/");
    const write = ["preupload", "commit", "branch"].includes(verb);
    const repo = repoFor(req, res, id, write);
    if (!repo) return;
    if (verb === "info" || verb === "revision") {
      const c = commitOf(repo, rev);
      if (!c) return fail(res, 404, `Invalid rev id: ${rev}`, "RevisionNotFound");
      const siblings = Object.entries(c.files).map(([p, f]) => ({ rfilename: p, size: f.size }));
      return send(res, 200, { id, modelId: id, sha: c.oid, private: repo.private, siblings });
    }
    if (verb === "tree") {
      // Only the recursive listing of the whole tree at a branch or commit.
      const c = commitOf(repo, seg[k + 1]);
      if (!c) return fail(res, 404, `Invalid rev id: ${seg[k + 1]}`, "RevisionNotFound");
      return send(res, 200, Object.entries(c.files).map(([p, f]) => ({ type: "file", path: p, size: f.size, oid: f.etag })));
    }
    if (verb === "commits") {
      const out = [];
      for (let c = commitOf(repo, rev); c; c = repo.commits.find((x) => x.oid === c.parent))
        out.push({ id: c.oid, title: c.title, message: "", authors: [], date: new Date(0).toISOString() });
      return send(res, 200, out);
    }
    if (verb === "branch") {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const c = commitOf(repo, b.startingPoint || "main");
      if (!c) return fail(res, 404, "starting point not found");
      repo.refs[rev] = c.oid;
      save();
      return send(res, 200, {});
    }
    if (verb === "preupload") {
      const b = JSON.parse((await readBody(req)).toString());
      return send(res, 200, { files: b.files.map((f) => ({ path: f.path, uploadMode: isLfsPath(f.path, f.size) ? "lfs" : "regular" })) });
    }
    // commit
    const parent = commitOf(repo, rev);
    if (!parent) return fail(res, 404, `Invalid rev id: ${rev}`, "RevisionNotFound");
    const lines = (await readBody(req)).toString().split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const files = { ...parent.files };
    let title = "";
    for (const { key, value } of lines) {
      if (key === "header") title = value.summary;
      else if (key === "file") {
        const buf = Buffer.from(value.content, value.encoding === "base64" ? "base64" : "utf8");
        const oid = sha256(buf);
        fs.writeFileSync(blobPath(oid), buf);
        files[value.path] = { size: buf.length, lfs: false, oid, etag: gitSha1(buf) };
      } else if (key === "lfsFile") {
        if (!fs.existsSync(blobPath(value.oid))) return fail(res, 422, `LFS object ${value.oid} for ${value.path} was never uploaded`);
        files[value.path] = { size: value.size, lfs: true, oid: value.oid, etag: value.oid };
      } else if (key === "deletedFile") delete files[value.path];
      else return fail(res, 400, "unknown commit line " + key);
    }
    const oid = crypto.createHash("sha1").update(parent.oid + title + JSON.stringify(files) + Date.now() + Math.random()).digest("hex");
    repo.commits.push({ oid, title, parent: parent.oid, files });
    repo.refs[rev] = oid;
    save();
    return send(res, 200, { commitOid: oid, commitUrl: `${base}/${id}/commit/${oid}` });
  }

  if (req.method === "POST" && url.pathname.endsWith(".git/info/lfs/objects/batch")) {
    const id = url.pathname.slice(1, -".git/info/lfs/objects/batch".length);
    if (!repoFor(req, res, id, true)) return;
    const b = JSON.parse((await readBody(req)).toString());
    const objects = b.objects.map(({ oid, size }) => {
      if (fs.existsSync(blobPath(oid))) return { oid, size };
      if (multipartChunk > 0 && size > multipartChunk) {
        const header = { chunk_size: String(multipartChunk) };
        for (let n = 1; n <= Math.ceil(size / multipartChunk); n++) header[String(n)] = `${base}/lfs/${oid}/part/${n}`;
        return { oid, size, actions: { upload: { href: `${base}/lfs/${oid}/complete`, header } } };
      }
      return { oid, size, actions: { upload: { href: `${base}/lfs/${oid}` } } };
    });
    return send(res, 200, { transfer: "basic", objects }, { "Content-Type": "application/vnd.git-lfs+json" });
  }

  if (seg[0] === "lfs") {
    const oid = seg[1];
    if (req.method === "PUT" && exitOnLfsPut > 0 && ++lfsPuts === exitOnLfsPut) {
      log("exiting on LFS PUT", lfsPuts);
      process.exit(3);
    }
    const partsDir = path.join(dataDir, "parts", oid);
    if (req.method === "GET" || req.method === "HEAD") {
      if (!fs.existsSync(blobPath(oid))) return fail(res, 404, "no such object");
      return sendBlob(req, res, blobPath(oid), { ETag: `"${oid}"` });
    }
    if (req.method === "PUT" && seg[2] === "part") {
      const buf = await readBody(req);
      fs.mkdirSync(partsDir, { recursive: true });
      fs.writeFileSync(path.join(partsDir, seg[3]), buf);
      return send(res, 200, "", { ETag: `"${crypto.createHash("md5").update(buf).digest("hex")}"` });
    }
    let buf;
    if (req.method === "POST" && seg[2] === "complete") {
      const b = JSON.parse((await readBody(req)).toString());
      buf = Buffer.concat(b.parts.sort((x, y) => x.partNumber - y.partNumber).map((p) => fs.readFileSync(path.join(partsDir, String(p.partNumber)))));
    } else if (req.method === "PUT") {
      buf = await readBody(req);
    } else return fail(res, 405, "method not allowed");
    if (sha256(buf) !== oid) return fail(res, 400, `content does not hash to ${oid}`);
    fs.writeFileSync(blobPath(oid) + ".tmp", buf);
    fs.renameSync(blobPath(oid) + ".tmp", blobPath(oid));
    return send(res, 200, "");
  }

  const r = seg.indexOf("resolve");
  if ((req.method === "GET" || req.method === "HEAD") && r > 0) {
    const id = seg.slice(0, r).join("/");
    const repo = repoFor(req, res, id, false);
    if (!repo) return;
    const c = commitOf(repo, seg[r + 1]);
    if (!c) return fail(res, 404, `Invalid rev id: ${seg[r + 1]}`, "RevisionNotFound");
    const f = c.files[seg.slice(r + 2).join("/")];
    if (!f) return fail(res, 404, "Entry not found", "EntryNotFound");
    const headers = { "X-Repo-Commit": c.oid };
    if (f.lfs) {
      res.writeHead(302, { ...headers, Location: `${base}/lfs/${f.oid}`, "X-Linked-Etag": `"${f.oid}"`, "X-Linked-Size": String(f.size), ETag: `"${f.etag}"`, "Content-Length": 0 });
      return res.end();
    }
    return sendBlob(req, res, blobPath(f.oid), { ...headers, ETag: `"${f.etag}"` });
  }
  fail(res, 404, "no route for " + req.method + " " + url.pathname);
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    if (!res.headersSent) fail(res, 500, String(e && e.message));
  });
});
server.listen(port, "127.0.0.1", () => {
  fs.writeFileSync(path.join(dataDir, "port"), String(server.address().port));
});
