// tests/server/hubcache.mjs — what the model-management tests share: a Hugging Face Hub cache
// built by hand from the fixture directories (the layout huggingface_hub writes: blobs named by
// sha256, snapshots/<commit>/<file> as relative symlinks to them, refs/main), and a `hearth serve`
// started with its own arguments and environment (no fixture models added, unlike harness.mjs).
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { BIN } from './harness.mjs';

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

let serial = 0;
// Starts `hearth serve ARGS` on an ephemeral port with env added to the environment. Resolves once
// it listens, or with {exited: {code, sig}, log} when it exits first (a refused start).
export async function serve(args, env = {}) {
  const portFile = path.join(os.tmpdir(), `hearth-models-port-${process.pid}-${serial++}`);
  fs.rmSync(portFile, { force: true });
  const child = spawn(BIN, ['serve', '--port', '0', '--port-file', portFile, '--ctx', '512', ...args],
    { stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, ...env } });
  let log = '';
  child.stderr.on('data', (d) => { log += d; process.stderr.write(d); });
  const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
  const t0 = Date.now();
  while (!fs.existsSync(portFile)) {
    if (child.exitCode !== null || child.signalCode !== null) return { exited: await exited, log };
    if (Date.now() - t0 > 120000) { child.kill('SIGKILL'); throw new Error(`hearth serve did not start:\n${log}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(fs.readFileSync(portFile, 'utf8'));
  fs.rmSync(portFile, { force: true });
  return {
    port, child, url: `http://127.0.0.1:${port}`, log: () => log,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

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
