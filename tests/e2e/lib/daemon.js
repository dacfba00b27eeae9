// Starts the real banyand on free loopback ports, waits until /ready answers 200, and stops it
// with SIGTERM, checking that it exits 0.
//
// Environment:
//   BANYAND            the daemon binary (default: <source>/build/server/banyand)
//   BANYAN_SOURCE_DIR  the source tree (default: two folders above this one's parent)
//   BANYAN_MODEL       a model file to pass as --model (default: the bundled stories260K of
//                      the source tree, so a build folder anywhere finds it)
//   E2E_TIME_SCALE     multiplies every time limit of the suite; default 1 here, 2 under ctest
//                      (4 with a sanitizer; cmake -DBANYAN_E2E_TIME_SCALE=N sets it)
//   E2E_DAEMON_LOGS    "1": copy the daemon's output to this process's stderr as it comes
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

const SOURCE_DIR = path.resolve(process.env.BANYAN_SOURCE_DIR || path.join(__dirname, '..', '..', '..'));
const BANYAND = process.env.BANYAND || path.join(SOURCE_DIR, 'build', 'server', 'banyand');
const GRPC_CLIENT =
  process.env.GRPC_CLIENT || path.join(SOURCE_DIR, 'build', 'tools', 'banyan-grpc-client');
const TIME_SCALE = Math.max(1, Number(process.env.E2E_TIME_SCALE || 1) || 1);
const MODEL_NAME = 'stories260K';

// A time limit of `ms` milliseconds, scaled for slow machines and sanitizer builds. Every limit
// of the suite goes through it.
function scaled(ms) {
  return Math.round(ms * TIME_SCALE);
}

function defaultModel() {
  if (process.env.BANYAN_MODEL) return process.env.BANYAN_MODEL;
  const bundled = path.join(SOURCE_DIR, 'models', 'stories260K', 'stories260K.bin');
  return fs.existsSync(bundled) ? bundled : null;
}

// A port nobody listens on now: bind port 0 on loopback, read it, close. Another process could
// take it before the daemon binds; start() retries with new ports when that happens.
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function twoFreePorts() {
  for (;;) {
    const a = await freePort();
    const b = await freePort();
    if (a !== b) return [a, b];
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every daemon this process started and did not see exit: killed if the test process ends
// early (a failed assertion must not leave a daemon behind).
const live = new Set();
process.on('exit', () => {
  for (const d of live) {
    try {
      d.proc.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});

class Daemon {
  constructor(proc, httpPort, grpcPort, args) {
    this.proc = proc;
    this.httpPort = httpPort;
    this.grpcPort = grpcPort;
    this.args = args;
    this.http = `http://127.0.0.1:${httpPort}`;
    this.grpcAddr = `127.0.0.1:${grpcPort}`;
    this.modelName = MODEL_NAME;
    this.logChunks = [];
    this.logBytes = 0;
    // 'close', not 'exit': 'exit' can come before the last of stdout / stderr has been read,
    // and a test that reads the log after the exit must see all of it.
    this.exit = new Promise((resolve) => {
      proc.on('close', (code, signal) => {
        live.delete(this);
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
    });
    const onData = (chunk) => {
      const s = chunk.toString('utf8');
      // Keep the last 4 MB or so: enough to explain a failure, bounded for the soak test.
      this.logChunks.push(s);
      this.logBytes += s.length;
      while (this.logBytes > 4_000_000 && this.logChunks.length > 1) {
        this.logBytes -= this.logChunks.shift().length;
      }
      if (process.env.E2E_DAEMON_LOGS === '1') process.stderr.write(s);
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    live.add(this);
  }

  // The daemon's output so far (the last few MB), stdout and stderr interleaved.
  get log() {
    return this.logChunks.join('');
  }

  // Resolves once the output matches `re`; rejects after `timeoutMs` (scaled) or when banyand
  // has exited without printing it. Output reaches this process asynchronously: a line logged
  // before an HTTP reply may be read after it.
  async waitForLog(re, timeoutMs = 10000) {
    const deadline = Date.now() + scaled(timeoutMs);
    for (;;) {
      if (re.test(this.log)) return;
      if (!this.running || Date.now() > deadline) {
        throw new Error(`banyand's output never matched ${re}\n${this.tail()}`);
      }
      await sleep(20);
    }
  }

  get running() {
    return this.exitInfo === undefined;
  }

  // GET <path> on the HTTP port; returns the fetch Response.
  get(p, headers = {}) {
    return fetch(this.http + p, { headers });
  }

  // Sends a signal (default SIGTERM) and returns at once.
  signal(sig = 'SIGTERM') {
    this.proc.kill(sig);
  }

  // Waits for the process to exit; rejects after `timeoutMs` (scaled).
  async waitExit(timeoutMs = 15000) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`banyand did not exit within ${scaled(timeoutMs)} ms\n${this.tail()}`)),
        scaled(timeoutMs),
      );
    });
    try {
      return await Promise.race([this.exit, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  // SIGTERM, then waits for the exit and checks that it is a clean exit 0. Idempotent.
  async stop(timeoutMs = 15000) {
    if (this.running) this.signal('SIGTERM');
    const info = await this.waitExit(timeoutMs);
    if (info.code !== 0) {
      throw new Error(
        `banyand exited with code ${info.code} signal ${info.signal} (expected 0)\n${this.tail()}`,
      );
    }
    return info;
  }

  // Kills it hard (cleanup after a failure); no checks.
  kill() {
    if (this.running) this.proc.kill('SIGKILL');
  }

  // The last lines of its output, for failure messages.
  tail(lines = 40) {
    return this.log.split('\n').slice(-lines).join('\n');
  }
}

async function waitReady(d, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!d.running) return false;
    try {
      const r = await fetch(`${d.http}/ready`);
      await r.arrayBuffer();
      if (r.status === 200) return true;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  return false;
}

// Starts banyand with `args` (extra flags) on two free loopback ports and waits for /ready.
// Options: { args: string[], readyTimeoutMs, env }.
async function startDaemon({ args = [], readyTimeoutMs = 30000, env = {} } = {}) {
  if (!fs.existsSync(BANYAND)) {
    throw new Error(`banyand not found at ${BANYAND}: build it or set BANYAND`);
  }
  const model = defaultModel();
  let lastError;
  for (let attempt = 0; attempt < 3; ++attempt) {
    const [httpPort, grpcPort] = await twoFreePorts();
    const full = [
      '--host', '127.0.0.1',
      '--http-port', String(httpPort),
      '--grpc-port', String(grpcPort),
      ...(model && !args.includes('--model') ? ['--model', model] : []),
      ...args,
    ];
    const proc = spawn(BANYAND, full, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    const d = new Daemon(proc, httpPort, grpcPort, full);
    if (await waitReady(d, scaled(readyTimeoutMs))) return d;
    d.kill();
    await d.exit;
    lastError = new Error(
      `banyand ${full.join(' ')} did not become ready (exit ${JSON.stringify(d.exitInfo)})\n${d.tail()}`,
    );
    // A port taken between freePort() and the daemon's bind: try again with new ones.
    if (!/cannot listen|address in use/i.test(d.log)) break;
  }
  throw lastError;
}

module.exports = { startDaemon, freePort, sleep, scaled, BANYAND, GRPC_CLIENT, SOURCE_DIR, MODEL_NAME };
