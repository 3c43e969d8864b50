// tests/server/hubcache.mjs — what the model-management tests share: a Hugging Face Hub cache
// built by hand from the fixture directories (the layout huggingface_hub writes: blobs named by
// sha256, snapshots/<commit>/<file> as relative symlinks to them, refs/main), and a `hearth serve`
// started with its own arguments and environment (no fixture models added, unlike startServer).
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { launch } from './harness.mjs';

// A fresh, empty cache directory; removed by the caller (fs.rmSync(dir, {recursive: true})).
export function tmpCache(tag) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `hearth-hub-${tag}-`));
}

// The cache folder of repo "ORG/NAME".
export const repoFolder = (root, repo) => path.join(root, `models--${repo.replace('/', '--')}`);

// Copies the files of dir (a model directory, flat) into root as repo's snapshot; returns the
// snapshot directory. edit(name, bytes) may change a file on the way (a broken config).
export function addRepo(root, repo, dir, edit = (name, bytes) => bytes) {
  const folder = repoFolder(root, repo);
  const commit = crypto.createHash('sha1').update(`${repo}:${dir}`).digest('hex');
  const snap = path.join(folder, 'snapshots', commit);
  fs.mkdirSync(path.join(folder, 'blobs'), { recursive: true });
  fs.mkdirSync(snap, { recursive: true });
  fs.mkdirSync(path.join(folder, 'refs'), { recursive: true });
  for (const name of fs.readdirSync(dir)) {
    const src = path.join(dir, name);
    if (!fs.statSync(src).isFile()) continue;
    const bytes = edit(name, fs.readFileSync(src));
    const etag = crypto.createHash('sha256').update(bytes).digest('hex');
    fs.writeFileSync(path.join(folder, 'blobs', etag), bytes);
    fs.symlinkSync(path.join('..', '..', 'blobs', etag), path.join(snap, name));
  }
  fs.writeFileSync(path.join(folder, 'refs', 'main'), commit);
  return snap;
}

// Starts `hearth serve ARGS` (harness.mjs's launch: an ephemeral port) with env added to the
// environment. Resolves once it listens, or with {exited: {code, sig}, log} when it exits first (a
// refused start).
export const serve = (args, env = {}) => launch(['serve', '--ctx', '512', ...args], { env, allowExit: true });

// GET /v1/models as {id: model}.
export async function modelsById(srv, headers = {}) {
  const r = await fetch(`${srv.url}/v1/models`, { headers });
  const body = await r.json();
  return Object.fromEntries(body.data.map((m) => [m.id, m]));
}

// The ids /status reports as loaded.
export async function loadedIds(srv, headers = {}) {
  const r = await fetch(`${srv.url}/status`, { headers });
  return (await r.json()).models.map((m) => m.id).sort();
}
