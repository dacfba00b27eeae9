// Shutdown signals (issue 14, finding 3): SIGTERM / SIGINT are blocked in every thread the
// process starts (the OpenBLAS workers included, which start before main), so a signal never
// kills the daemon with status -15:
//  - a signal during start-up (model loading, KV allocation) ends it with exit 0 at once;
//  - more signals during a drain are logged and ignored; the drain goes on and the process
//    exits 0 when it ends.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { describe, test } = require('node:test');
const { startDaemon, freePort, sleep, scaled, BANYAND, SOURCE_DIR, MODEL_NAME } = require('./lib/daemon');
const { openaiClient, startStream } = require('./lib/http');

describe('shutdown signals', () => {
  test('SIGTERM during start-up exits 0 at once, never -15', async (t) => {
    // A large KV pool keeps the daemon in start-up (allocating and zeroing it) for a while
    // after it logs "loading model".
    const [httpPort, grpcPort] = [await freePort(), await freePort()];
    const proc = spawn(BANYAND, [
      '--host', '127.0.0.1', '--http-port', String(httpPort), '--grpc-port', String(grpcPort),
      '--model', `${SOURCE_DIR}/models/stories260K/stories260K.bin`, '--kv-memory', '1GiB',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    t.after(() => proc.exitCode === null && proc.kill('SIGKILL'));
    let log = '';
    let signalled = false;
    const exit = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
    const onData = (chunk) => {
      log += chunk.toString('utf8');
      if (!signalled && /loading model/.test(log)) {
        signalled = true;
        proc.kill('SIGTERM');
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    const t0 = Date.now();
    const info = await Promise.race([
      exit,
      sleep(scaled(20000)).then(() => ({ timeout: true })),
    ]);
    assert.deepEqual(info, { code: 0, signal: null }, log);
    assert.ok(signalled, log);
    assert.match(log, /during start-up: exiting \(status 0\)/, log);
    assert.doesNotMatch(log, /serving model/, 'it went on to serve');
    t.diagnostic(`exited ${Date.now() - t0} ms after start`);
  });

  test('more SIGTERM / SIGINT during a drain are logged and ignored, exit 0', async (t) => {
    const d = await startDaemon({ args: ['--drain-timeout-ms', '60000'] });
    t.after(() => d.kill());
    const client = openaiClient(d);
    const body = {
      model: MODEL_NAME,
      prompt: 'Once upon a time',
      max_tokens: 400,
      n: 16,
      temperature: 1,
      ignore_eos: true,
    };
    const streams = [0, 1].map((i) => startStream(client, { ...body, seed: i }));
    await Promise.all(streams.map((s) => s.firstChunk));

    d.signal('SIGTERM');
    // The drain has begun once /ready says 503.
    for (const t0 = Date.now(); ; await sleep(5)) {
      const r = await d.get('/ready');
      await r.arrayBuffer();
      if (r.status === 503) break;
      assert.ok(Date.now() - t0 < scaled(2000), '/ready never went 503');
    }
    d.signal('SIGTERM');
    await sleep(20);
    d.signal('SIGINT');
    await sleep(20);
    d.signal('SIGTERM');
    await sleep(100);
    assert.ok(d.running, `the daemon died: ${JSON.stringify(d.exitInfo)}\n${d.tail()}`);

    // Whether every stream is delivered to its end is the drain's business (drain.test.js);
    // here: the extra signals neither killed the process nor shortened the drain.
    await Promise.allSettled(streams.map((s) => s.done));
    const exit = await d.waitExit(30000);
    assert.deepEqual(exit, { code: 0, signal: null }, d.tail());
    const ignored = d.log.match(/while draining: ignored/g) || [];
    assert.equal(ignored.length, 3, d.tail());
  });
});
