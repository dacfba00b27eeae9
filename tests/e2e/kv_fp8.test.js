// The FP8 KV cache (--kv-cache-dtype fp8, here in vLLM's spelling fp8_e4m3) through the official
// client: banyand says at start-up and in vllm:cache_config_info which KV dtype runs, and a burst of chat requests sharing one
// system prompt gives each request exactly what it gives alone (the CPU backend rounds each K /
// V row by the FP8 rule, which depends on the row only, whatever else the step holds).
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { openaiClient } = require('./lib/http');
const { STORY } = require('./lib/text');

const QUESTIONS = [
  'What was the dog called?', 'Where did the ball go?', 'Who helped Tom?', 'Was Tom happy?',
  'What did the lady carry?', 'Tell me more.', 'What happened next?', 'How did it end?',
];

describe('FP8 KV cache', () => {
  let d;
  let client;

  before(async () => {
    d = await startDaemon({ args: ['--chunk-size', '16', '--kv-cache-dtype', 'fp8_e4m3'] });
    client = openaiClient(d);
  });
  after(async () => {
    if (d) await d.stop();
  });

  test('the start-up log and /metrics name the KV dtype', async () => {
    await d.waitForLog(/\[kv\] memory budget .* KV dtype fp8 \(E4M3/);
    const body = await (await fetch(`${d.http}/metrics`)).text();
    assert.match(body, /^vllm:cache_config_info\{[^}]*cache_dtype="fp8"[^}]*\} 1$/m);
  });

  test('a concurrent shared-prefix burst equals the solo runs', async () => {
    const ask = (q) =>
      client.chat.completions.create({
        model: MODEL_NAME,
        messages: [
          { role: 'system', content: STORY },
          { role: 'user', content: q },
        ],
        max_tokens: 32,
        temperature: 0,
      });
    const solo = [];
    for (const q of QUESTIONS) solo.push((await ask(q)).choices[0].message.content);
    const together = await Promise.all(QUESTIONS.map(ask));
    for (let i = 0; i < QUESTIONS.length; ++i) {
      assert.ok(solo[i].length > 0, `empty completion for ${QUESTIONS[i]}`);
      assert.equal(together[i].choices[0].message.content, solo[i], QUESTIONS[i]);
    }
  });
});
