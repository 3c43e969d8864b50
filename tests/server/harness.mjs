// tests/server/harness.mjs — starts `hearth serve` on an ephemeral loopback port for a test file.
// HEARTH_BIN: the hearth executable; HEARTH_SERVER_FIXTURES: the directory make-fixtures.sh filled.
// Fails the test (exit 1) when the prerequisites are missing: a test that cannot run never passes.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.HEARTH_BIN;
export const FIX = process.env.HEARTH_SERVER_FIXTURES;
export const CHAT = 'tiny-chat';
export const EMBED = 'tiny-embed';

export function requirePrereqs({ openai = true } = {}) {
  const missing = [];
  if (!BIN || !fs.existsSync(BIN)) missing.push('HEARTH_BIN');
  if (!FIX || !fs.existsSync(path.join(FIX, CHAT, 'model.safetensors'))) missing.push('fixtures');
  if (openai && !fs.existsSync(path.join(here, 'node_modules', 'openai')))
    missing.push('node_modules/openai (run tests/server/setup.sh)');
  if (missing.length) {
    console.error(`FAIL: missing ${missing.join(', ')}`);
    process.exit(1);
  }
}

let serial = 0;
// Starts `hearth serve ARGS --port 0 --port-file F` with env added to the environment; resolves once
// it listens. When it exits first: throws, or with allowExit resolves {exited: {code, sig}, log} (a
// start the test expects to be refused).
export async function launch(args, { env = {}, allowExit = false } = {}) {
  const portFile = path.join(os.tmpdir(), `hearth-test-port-${process.pid}-${serial++}`);
  fs.rmSync(portFile, { force: true });
  const child = spawn(BIN, [...args, '--port', '0', '--port-file', portFile],
    { stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, ...env } });
  let log = '';
  child.stderr.on('data', (d) => { log += d; process.stderr.write(d); });
  const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
  const t0 = Date.now();
  while (!fs.existsSync(portFile)) {
    if (child.exitCode !== null || child.signalCode !== null) {
      if (allowExit) return { exited: await exited, log };
      throw new Error(`hearth serve exited early:\n${log}`);
    }
    if (Date.now() - t0 > 120000) { child.kill('SIGKILL'); throw new Error(`hearth serve did not start:\n${log}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(fs.readFileSync(portFile, 'utf8'));
  fs.rmSync(portFile, { force: true });
  return {
    port, child, pid: child.pid,
    url: `http://127.0.0.1:${port}`,
    log: () => log,
    // SIGTERM, then the exit status (0 = clean shutdown; under ASan, also no leaks).
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

// Starts a server with the two fixture models; resolves once it listens. extra: more arguments.
export async function startServer(extra = []) {
  return launch(['serve', '--model', path.join(FIX, CHAT), '--model', path.join(FIX, EMBED),
    '--parallel', '20', '--ctx', '512', ...extra]);
}

export async function getJSON(srv, p) {
  const r = await fetch(srv.url + p);
  return { status: r.status, body: await r.json() };
}

export async function postJSON(srv, p, body, headers = {}) {
  const r = await fetch(srv.url + p, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, body: json, text };
}

// Resident set size of a process in bytes (Linux).
export function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A model directory like tiny-chat with its own chat_template.jinja (the other files hard-linked,
// or copied where links fail), named `name` so that the server's model id is `name`.
export function modelWithTemplate(name, template) {
  const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-tmpl-')), name);
  fs.mkdirSync(dir);
  for (const f of fs.readdirSync(path.join(FIX, CHAT))) {
    if (f === 'chat_template.jinja') continue;
    const src = path.join(FIX, CHAT, f);
    try { fs.linkSync(src, path.join(dir, f)); } catch { fs.copyFileSync(src, path.join(dir, f)); }
  }
  fs.writeFileSync(path.join(dir, 'chat_template.jinja'), template);
  return dir;
}
export const removeModelDir = (dir) => fs.rmSync(path.dirname(dir), { recursive: true, force: true });
