// How users start banyand (issue 13, item 7): the banner names the ports it really listens on,
// vLLM's option names work (or are refused saying why), paths in a config file are relative to
// the file, --backend auto says what it chose, and `banyan generate` prints the completion as
// the API returns it (its leading space included).
'use strict';

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startDaemon, freePort, sleep, scaled, BANYAND, SOURCE_DIR } = require('./lib/daemon');

const MODEL = path.join(SOURCE_DIR, 'models', 'stories260K', 'stories260K.bin');
const CLI = process.env.BANYAN_CLI || path.join(SOURCE_DIR, 'build', 'tools', 'banyan');

// Runs banyand with exactly `args` (no ports or model added); resolves with its exit.
function run(args, opts = {}) {
  const proc = spawn(BANYAND, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  let log = '';
  proc.stdout.on('data', (c) => { log += c; });
  proc.stderr.on('data', (c) => { log += c; });
  // 'close': after the exit and the last of its output (see Daemon.exit in lib/daemon.js).
  const exit = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
  return { proc, exit, get log() { return log; } };
}

async function waitHealthy(port, d, timeoutMs = 30000) {
  const end = Date.now() + scaled(timeoutMs);
  while (Date.now() < end) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/ready`);
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    if (d.proc.exitCode !== null) break;
    await sleep(50);
  }
  throw new Error(`banyand did not become ready on ${port}:\n${d.log}`);
}

async function stop(d) {
  d.proc.kill('SIGTERM');
  const info = await d.exit;
  assert.equal(info.code, 0, d.log);
}

test('the start-up banner names the ports banyand listens on', async () => {
  const d = await startDaemon();
  try {
    assert.notEqual(d.httpPort, 8000);
    // banyand logs the banner before /ready answers 200, but its output is read asynchronously.
    await d.waitForLog(new RegExp(`banyan-grpc-client --addr localhost:${d.grpcPort} `));
    assert.match(d.log, new RegExp(`try: curl -s http://localhost:${d.httpPort}/v1/completions`));
    assert.doesNotMatch(d.log, /:8000\b|:50051\b/);
    assert.match(d.log, /backend cpu \(--backend auto: /);
  } finally {
    await d.stop();
  }
});

test("vLLM's option names are accepted where they map, refused where they do not", async () => {
  const [http, grpc] = [await freePort(), await freePort()];
  const d = run(['--model', MODEL, '--host', '127.0.0.1', '--port', String(http),
    '--grpc-port', String(grpc), '--max-num-seqs', '4', '--enable-prefix-caching',
    '--max-model-len', '128', '--served-model-name', 'tiny']);
  try {
    await waitHealthy(http, d);
    const models = await (await fetch(`http://127.0.0.1:${http}/v1/models`)).json();
    assert.equal(models.data[0].id, 'tiny');
    assert.equal(models.data[0].max_model_len, 128);
  } finally {
    await stop(d);
  }
  const refused = run(['--model', MODEL, '--backend', 'cpu', '--gpu-memory-utilization', '0.9']);
  const info = await refused.exit;
  assert.equal(info.code, 2, refused.log);
  assert.match(refused.log, /--gpu-memory-utilization sizes a GPU's KV cache; the CPU backend's is --kv-memory/);
  const unmapped = run(['--model', MODEL, '--swap-space', '4']);
  assert.equal((await unmapped.exit).code, 2, unmapped.log);
  assert.match(unmapped.log, /swap-space: vLLM's option has no banyand counterpart/);
  const tooLong = run(['--model', MODEL, '--http-port', '0', '--grpc-port', '0',
    '--max-model-len', '100000']);
  assert.equal((await tooLong.exit).code, 1, tooLong.log);
  assert.match(tooLong.log, /--max-model-len 100000 is longer than the model's context/);
});

test('paths in a --config file are relative to the file, not the working directory', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'banyan-deploy-'));
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'banyan-deploy-cwd-'));
  try {
    fs.mkdirSync(path.join(dir, 'conf'));
    fs.mkdirSync(path.join(dir, 'models'));
    fs.symlinkSync(MODEL, path.join(dir, 'models', 'story.bin'));
    fs.symlinkSync(path.join(path.dirname(MODEL), 'tok512.model'), path.join(dir, 'models', 'tok512.model'));
    const [http, grpc] = [await freePort(), await freePort()];
    fs.writeFileSync(path.join(dir, 'conf', 'banyand.json'), JSON.stringify({
      model: '../models/story.bin', host: '127.0.0.1', http_port: http, grpc_port: grpc,
    }));
    // Started from another folder, with the config named relative to that folder.
    const d = run(['--config', path.relative(cwd, path.join(dir, 'conf', 'banyand.json'))], { cwd });
    try {
      await waitHealthy(http, d);
      assert.match(d.log, /loading model .*models\/story\.bin/);
      const models = await (await fetch(`http://127.0.0.1:${http}/v1/models`)).json();
      assert.equal(models.data[0].id, 'story');
    } finally {
      await stop(d);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(cwd, { recursive: true, force: true });
  }
});

test('banyan generate prints the completion as the API returns it, leading space included', async (t) => {
  if (!fs.existsSync(CLI)) {
    t.skip(`banyan CLI not found at ${CLI}`);
    return;
  }
  const prompt = 'Once upon a time, there was a little girl named Lily.';
  const cli = await new Promise((resolve, reject) => {
    execFile(CLI, ['generate', '--model', MODEL, '--prompt', prompt, '--max-tokens', '24',
      '--temperature', '0'], (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout)));
  });
  const d = await startDaemon();
  try {
    const r = await fetch(`${d.http}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: d.modelName, prompt, max_tokens: 24, temperature: 0 }),
    });
    const api = (await r.json()).choices[0].text;
    assert.ok(api.startsWith(' '), `the API's completion starts a new word: ${JSON.stringify(api)}`);
    assert.equal(cli, `${api}\n`);
  } finally {
    await d.stop();
  }
});
