// Bad input against both front ends: every error case answers with the right status and an
// error body (HTTP: OpenAI's {"error":{message,type,param,code}}; gRPC: a status code and a
// message naming the problem), and the server keeps serving afterwards.
'use strict';

const assert = require('node:assert/strict');
const { after, before, describe, test } = require('node:test');
const OpenAI = require('openai');
const { startDaemon, MODEL_NAME } = require('./lib/daemon');
const { assertErrorBody, openaiClient, post } = require('./lib/http');
const g = require('./lib/grpc');
const { value, waitIdle } = require('./lib/metrics');
const { STORY } = require('./lib/text');

const KEY = 'e2e-key-one';
const KEY2 = 'e2e-key-two';
const MAX_BODY = 65536;
const CONTEXT = 512;
const AUTH = { Authorization: `Bearer ${KEY}` };

describe('bad input', () => {
  let d;
  let rpc;
  const md = () => g.auth(KEY);

  before(async () => {
    d = await startDaemon({
      args: ['--api-key', KEY, '--api-key', KEY2, '--max-body-bytes', String(MAX_BODY)],
    });
    rpc = g.clients(d);
  });
  after(async () => {
    if (rpc) rpc.close();
    if (d) await d.stop();
  });

  // POSTs with the key and checks status + error body; returns the inner error object.
  async function expectError(path, body, status, { param, code, type, headers = AUTH, what } = {}) {
    const label = what || `${path} ${typeof body === 'string' ? body.slice(0, 60) : JSON.stringify(body).slice(0, 80)}`;
    const r = await post(d, path, body, { headers });
    assert.equal(r.status, status, `${label}: status ${r.status}, body ${r.text}`);
    assert.match(r.headers.get('content-type') || '', /application\/json/, label);
    const e = assertErrorBody(r.json, label);
    if (type !== undefined) assert.equal(e.type, type, `${label}: type`);
    if (param !== undefined) assert.equal(e.param, param, `${label}: param`);
    if (code !== undefined) assert.equal(e.code, code, `${label}: code`);
    return e;
  }

  async function promptTokens(text) {
    const r = await post(d, '/tokenize', { prompt: text }, { headers: AUTH });
    assert.equal(r.status, 200, r.text);
    return r.json.count;
  }

  describe('HTTP', () => {
    test('malformed JSON and non-object bodies: 400', async () => {
      const e = await expectError('/v1/completions', '{"prompt": "Hi", "max_tokens": ', 400, {
        type: 'invalid_request_error',
      });
      assert.match(e.message, /parse|JSON/i);
      await expectError('/v1/chat/completions', '{"messages": [}', 400);
      await expectError('/v1/completions', '[1, 2, 3]', 400);
      await expectError('/v1/completions', '"just a string"', 400);
      await expectError('/v1/completions', '', 400);
      await expectError('/tokenize', '{not json', 400);
    });

    test('wrong types: 400 naming the field', async () => {
      const base = { model: MODEL_NAME, prompt: 'Hello' };
      const cases = [
        [{ ...base, max_tokens: 'ten' }, 'max_tokens'],
        [{ ...base, max_tokens: 2.5 }, 'max_tokens'],
        [{ ...base, temperature: 'hot' }, 'temperature'],
        [{ ...base, n: [2] }, 'n'],
        [{ ...base, stream: 'yes' }, 'stream'],
        [{ ...base, stop: 7 }, 'stop'],
        [{ ...base, seed: 'abc' }, 'seed'],
        [{ ...base, logprobs: true }, 'logprobs'],
        [{ model: MODEL_NAME, prompt: 42 }, 'prompt'],
        [{ model: 7, prompt: 'Hello' }, 'model'],
      ];
      for (const [body, param] of cases) {
        const e = await expectError('/v1/completions', body, 400, { param, type: 'invalid_request_error' });
        assert.ok(e.message.includes(param), `message names ${param}: ${e.message}`);
      }
      const chat = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }] };
      await expectError('/v1/chat/completions', { ...chat, max_tokens: 'ten' }, 400, { param: 'max_tokens' });
      await expectError('/v1/chat/completions', { ...chat, logprobs: 'yes' }, 400, { param: 'logprobs' });
      await expectError('/v1/chat/completions', { model: MODEL_NAME, messages: 'hi' }, 400, { param: 'messages' });
      await expectError('/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 5 }] }, 400);
      await expectError('/v1/chat/completions', { model: MODEL_NAME, messages: ['hi'] }, 400);
    });

    test('unknown model: 404 model_not_found', async () => {
      const e = await expectError('/v1/completions', { model: 'gpt-4o', prompt: 'Hello' }, 404, {
        param: 'model',
        code: 'model_not_found',
      });
      assert.match(e.message, /gpt-4o/);
      await expectError(
        '/v1/chat/completions',
        { model: 'nope', messages: [{ role: 'user', content: 'Hi' }] },
        404,
        { code: 'model_not_found' },
      );
      // The official client raises NotFoundError.
      const client = openaiClient(d, { apiKey: KEY });
      await assert.rejects(
        client.completions.create({ model: 'nope', prompt: 'Hello', max_tokens: 2 }),
        (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found',
      );
    });

    test('prompt + max_tokens beyond the context: 400 with both numbers', async () => {
      const n = await promptTokens(STORY);
      const maxTokens = 400;
      assert.ok(n < CONTEXT && n + maxTokens > CONTEXT);
      const e = await expectError('/v1/completions', { model: MODEL_NAME, prompt: STORY, max_tokens: maxTokens }, 400, {
        code: 'context_length_exceeded',
        param: 'max_tokens',
      });
      assert.ok(e.message.includes(String(CONTEXT)), e.message);
      assert.ok(e.message.includes(String(n + maxTokens)), e.message);
      assert.ok(e.message.includes(String(n)), e.message);
      // The prompt alone longer than the context.
      const long = `${STORY} ${STORY}`;
      const n2 = await promptTokens(long);
      const e2 = await expectError('/v1/completions', { model: MODEL_NAME, prompt: long, max_tokens: 1 }, 400, {
        code: 'context_length_exceeded',
      });
      assert.ok(e2.message.includes(String(CONTEXT)) && e2.message.includes(String(n2)), e2.message);
      // Chat: the same through max_completion_tokens.
      const e3 = await expectError(
        '/v1/chat/completions',
        { model: MODEL_NAME, messages: [{ role: 'user', content: STORY }], max_completion_tokens: 500 },
        400,
        { code: 'context_length_exceeded', param: 'max_completion_tokens' },
      );
      assert.ok(e3.message.includes(String(CONTEXT)), e3.message);
      // And exactly at the limit it is accepted.
      const ok = await post(d, '/v1/completions', { model: MODEL_NAME, prompt: STORY, max_tokens: CONTEXT - n, temperature: 0 }, { headers: AUTH });
      assert.equal(ok.status, 200, ok.text);
    });

    test('empty prompt: 400', async () => {
      for (const prompt of ['', [], [[]]]) {
        await expectError('/v1/completions', { model: MODEL_NAME, prompt }, 400, { param: 'prompt' });
      }
      await expectError('/v1/completions', { model: MODEL_NAME }, 400, { param: 'prompt' });
      await expectError('/v1/chat/completions', { model: MODEL_NAME, messages: [] }, 400, { param: 'messages' });
      await expectError('/v1/chat/completions', { model: MODEL_NAME }, 400, { param: 'messages' });
    });

    test('n, max_tokens and sampling values out of range: 400 naming the field', async () => {
      const base = { model: MODEL_NAME, prompt: 'Hello' };
      const cases = [
        [{ n: 0 }, 'n'],
        [{ n: -1 }, 'n'],
        [{ n: 17 }, 'n'],
        [{ n: 1e9 }, 'n'],
        [{ max_tokens: 0 }, 'max_tokens'],
        [{ max_tokens: -5 }, 'max_tokens'],
        [{ max_tokens: 1e12 }, 'max_tokens'],
        [{ temperature: -1 }, 'temperature'],
        [{ top_p: 0 }, 'top_p'],
        [{ top_p: 1.5 }, 'top_p'],
        [{ min_p: 2 }, 'min_p'],
        [{ top_k: -2 }, 'top_k'],
        [{ frequency_penalty: 3 }, 'frequency_penalty'],
        [{ presence_penalty: -2.5 }, 'presence_penalty'],
        [{ repetition_penalty: 0 }, 'repetition_penalty'],
        [{ logprobs: 6 }, 'logprobs'],
        [{ stop: [''] }, 'stop'],
        [{ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, 'stop'],
        [{ stop_token_ids: [512] }, 'stop_token_ids'],
        [{ logit_bias: { 512: 1 } }, 'logit_bias'],
        [{ logit_bias: { 5: 101 } }, 'logit_bias'],
        [{ logit_bias: { five: 1 } }, 'logit_bias'],
        [{ logit_bias: [5] }, 'logit_bias'],
        [{ prompt: [1, 2, 600] }, 'prompt'],
        [{ prompt: [1, -3] }, 'prompt'],
      ];
      for (const [extra, param] of cases) {
        const e = await expectError('/v1/completions', { ...base, ...extra }, 400, { param });
        assert.ok(e.message.length > 10, e.message);
      }
      const chat = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }] };
      await expectError('/v1/chat/completions', { ...chat, n: 0 }, 400, { param: 'n' });
      await expectError('/v1/chat/completions', { ...chat, max_tokens: 0 }, 400, { param: 'max_tokens' });
      await expectError('/v1/chat/completions', { ...chat, logprobs: true, top_logprobs: 21 }, 400, {
        param: 'top_logprobs',
      });
      await expectError('/v1/chat/completions', { ...chat, stream_options: { include_usage: true } }, 400, {
        param: 'stream_options',
      });
    });

    test('invalid UTF-8 in the body: 400', async () => {
      const bad = Buffer.concat([
        Buffer.from('{"model":"stories260K","prompt":"Hello '),
        Buffer.from([0xff, 0xfe, 0xc3]),
        Buffer.from('","max_tokens":4}'),
      ]);
      const e = await expectError('/v1/completions', bad, 400, { code: 'invalid_utf8' });
      assert.match(e.message, /UTF-8/);
      // An overlong encoding of '/' and a truncated sequence in a chat message.
      for (const bytes of [[0xc0, 0xaf], [0xe2, 0x82]]) {
        const body = Buffer.concat([
          Buffer.from('{"messages":[{"role":"user","content":"'),
          Buffer.from(bytes),
          Buffer.from('"}]}'),
        ]);
        await expectError('/v1/chat/completions', body, 400, { what: `bytes ${bytes}` });
      }
      // A lone surrogate escape is not a character either.
      await expectError('/v1/completions', '{"prompt":"a\\ud800b"}', 400, { what: 'lone surrogate' });
    });

    test('body over --max-body-bytes: 413', async () => {
      const big = { model: MODEL_NAME, prompt: 'a'.repeat(MAX_BODY + 10) };
      const e = await expectError('/v1/completions', big, 413, { code: 'request_too_large' });
      assert.ok(e.message.includes(String(MAX_BODY)), e.message);
      await expectError('/tokenize', big, 413);
      // Sent in chunks, with no Content-Length.
      const bytes = Buffer.from(JSON.stringify(big));
      const r = await fetch(`${d.http}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...AUTH },
        duplex: 'half',
        body: new ReadableStream({
          start(controller) {
            for (let i = 0; i < bytes.length; i += 8192) controller.enqueue(bytes.subarray(i, i + 8192));
            controller.close();
          },
        }),
      });
      const text = await r.text();
      assert.equal(r.status, 413, `chunked body: ${r.status} ${text.slice(0, 200)}`);
      assertErrorBody(JSON.parse(text), 'chunked 413');
    });

    test('unknown path: 404; wrong method: 405', async () => {
      for (const p of ['/v1/nothing', '/v2/completions', '/', '/v1/completions/extra']) {
        const r = await d.get(p, AUTH);
        assert.equal(r.status, 404, p);
        assertErrorBody(await r.json(), p);
      }
      await expectError('/v1/engines/x/completions', { prompt: 'x' }, 404);
      const r = await d.get('/v1/completions', AUTH);
      assert.equal(r.status, 405);
      assert.match(r.headers.get('allow'), /POST/);
      assertErrorBody(await r.json(), 'GET /v1/completions');
    });

    test('auth: 401 without or with a wrong key, 200 with either key', async () => {
      const body = { model: MODEL_NAME, prompt: 'Hello', max_tokens: 2 };
      const missing = await expectError('/v1/completions', body, 401, { headers: {}, code: 'invalid_api_key' });
      assert.match(missing.message, /API key/i);
      const wrong = [
        { Authorization: 'Bearer not-the-key' },
        { Authorization: `Bearer ${KEY}x` },
        { Authorization: `Bearer ${KEY.slice(0, -1)}` },
        { Authorization: KEY },
        { Authorization: `Basic ${Buffer.from(`user:${KEY}`).toString('base64')}` },
      ];
      for (const headers of wrong) {
        await expectError('/v1/completions', body, 401, { headers, what: JSON.stringify(headers) });
      }
      const r401 = await d.get('/v1/models', { Authorization: 'Bearer wrong' });
      assert.equal(r401.status, 401);
      assert.match(r401.headers.get('www-authenticate') || '', /Bearer/);
      assert.equal((await d.get('/metrics')).status, 401);
      // Probes need no key.
      assert.equal((await d.get('/health')).status, 200);
      assert.equal((await d.get('/ready')).status, 200);
      for (const key of [KEY, KEY2]) {
        const ok = await post(d, '/v1/completions', body, { headers: { Authorization: `Bearer ${key}` } });
        assert.equal(ok.status, 200, ok.text);
        assert.equal(ok.json.usage.completion_tokens, 2);
      }
      // The official client: AuthenticationError with a wrong key, success with the right one.
      await assert.rejects(
        openaiClient(d, { apiKey: 'wrong' }).models.list(),
        (err) => err instanceof OpenAI.AuthenticationError && err.status === 401,
      );
      const models = await openaiClient(d, { apiKey: KEY2 }).models.list();
      assert.equal(models.data[0].id, MODEL_NAME);
    });

    test('unknown request fields are ignored, as vLLM does', async () => {
      const r = await post(d, '/v1/completions', { model: MODEL_NAME, prompt: 'Hello', max_tokens: 2, frobnicate: true }, { headers: AUTH });
      assert.equal(r.status, 200, r.text);
    });
  });

  describe('gRPC', () => {

    async function expectStatus(request, code, { metadata = md(), match, what } = {}) {
      const label = what || JSON.stringify(request).slice(0, 100);
      await assert.rejects(g.generate(rpc.generation, request, { metadata }), (err) => {
        assert.equal(err.code, code, `${label}: got ${err.code} ${err.details}`);
        assert.equal(typeof err.details, 'string');
        assert.ok(err.details.length > 0, `${label}: empty status message`);
        if (match) assert.match(err.details, match, label);
        return true;
      });
    }

    test('missing, empty and out-of-vocabulary prompts: INVALID_ARGUMENT', async () => {
      await expectStatus({ sampling: { max_tokens: 2 } }, g.status.INVALID_ARGUMENT, { match: /input|prompt/ });
      await expectStatus({ text: '' }, g.status.INVALID_ARGUMENT, { match: /empty/ });
      await expectStatus({ token_ids: { ids: [] } }, g.status.INVALID_ARGUMENT, { match: /empty/ });
      await expectStatus({ token_ids: { ids: [1, 600] } }, g.status.INVALID_ARGUMENT, { match: /600/ });
      await expectStatus({ token_ids: { ids: [-1] } }, g.status.INVALID_ARGUMENT);
    });

    test('unknown model: NOT_FOUND', async () => {
      await expectStatus({ model: 'gpt-4o', text: 'Hi' }, g.status.NOT_FOUND, { match: /gpt-4o/ });
      await assert.rejects(g.unary(rpc.generation, 'Tokenize', { model: 'x', text: 'Hi' }, md()), (e) => e.code === g.status.NOT_FOUND);
    });

    test('prompt + max_tokens beyond the context: INVALID_ARGUMENT with both numbers', async () => {
      const n = await promptTokens(STORY);
      await expectStatus({ text: STORY, sampling: { max_tokens: 300 } }, g.status.INVALID_ARGUMENT, {
        match: new RegExp(`512[\\s\\S]*${n + 300}|${n + 300}[\\s\\S]*512`),
      });
      await expectStatus({ token_ids: { ids: Array(600).fill(5) } }, g.status.INVALID_ARGUMENT, { match: /512/ });
    });

    test('n, max_tokens and sampling values out of range: INVALID_ARGUMENT naming the field', async () => {
      const cases = [
        [{ n: 0 }, /\bn\b/],
        [{ n: 17 }, /\bn\b/],
        [{ max_tokens: 0 }, /max_tokens/],
        [{ max_tokens: -3 }, /max_tokens/],
        [{ temperature: -1 }, /temperature/],
        [{ top_p: 0 }, /top_p/],
        [{ min_p: 1.5 }, /min_p/],
        [{ top_k: -2 }, /top_k/],
        [{ logprobs: 21 }, /logprobs/],
        [{ stop: [''] }, /stop/],
        [{ stop_token_ids: [9999] }, /stop_token_ids/],
        [{ frequency_penalty: 9 }, /frequency_penalty/],
      ];
      for (const [sampling, match] of cases) {
        await expectStatus({ text: 'Hello', sampling: { max_tokens: 4, ...sampling } }, g.status.INVALID_ARGUMENT, {
          match,
        });
      }
      await expectStatus({ text: 'Hello', request_id: 'has spaces!' }, g.status.INVALID_ARGUMENT, { match: /request_id/ });
      await expectStatus({ text: 'Hello', user: 'u'.repeat(300) }, g.status.INVALID_ARGUMENT, { match: /user/ });
      await expectStatus({ text: 'Hello', priority: 2e6 }, g.status.INVALID_ARGUMENT, { match: /priority/ });
    });

    test('invalid UTF-8 and malformed messages: INVALID_ARGUMENT', async () => {
      const { lengthDelimited, varintField } = g.wire;
      // GenerateRequest.text (field 2) with bytes that are not UTF-8.
      const badText = Buffer.concat([lengthDelimited(2, Buffer.from([0x48, 0x69, 0xff, 0xfe]))]);
      let s = await g.rawGenerate(rpc.raw, badText, md());
      assert.equal(s.code, g.status.INVALID_ARGUMENT, s.details);
      assert.match(s.details, /text[\s\S]*UTF-8/);
      assert.equal(s.messages, 0);
      // A stop string (SamplingParams.stop, field 11, inside field 5) that is not UTF-8.
      const badStop = Buffer.concat([
        lengthDelimited(2, Buffer.from('Hello')),
        lengthDelimited(5, Buffer.concat([varintField(1, 4), lengthDelimited(11, Buffer.from([0xc0, 0xaf]))])),
      ]);
      s = await g.rawGenerate(rpc.raw, badStop, md());
      assert.equal(s.code, g.status.INVALID_ARGUMENT, s.details);
      assert.match(s.details, /stop/);
      // Not a protobuf message at all: a length running past the end.
      s = await g.rawGenerate(rpc.raw, Buffer.from([0x12, 0x7f, 0x41]), md());
      assert.equal(s.code, g.status.INVALID_ARGUMENT, s.details);
      // A message with a good prompt still works over the raw path.
      s = await g.rawGenerate(
        rpc.raw,
        Buffer.concat([lengthDelimited(2, Buffer.from('Hello')), lengthDelimited(5, varintField(1, 3))]),
        md(),
      );
      assert.equal(s.code, g.status.OK, s.details);
      assert.ok(s.messages >= 1);
    });

    test('message over the size limit: RESOURCE_EXHAUSTED', async () => {
      await expectStatus({ text: 'a'.repeat(MAX_BODY + 100) }, g.status.RESOURCE_EXHAUSTED);
    });

    test('auth: UNAUTHENTICATED without or with a wrong key, OK with it; health needs none', async () => {
      const req = { text: 'Hello', sampling: { max_tokens: 2 } };
      await expectStatus(req, g.status.UNAUTHENTICATED, { metadata: g.auth(), match: /API key/ });
      await expectStatus(req, g.status.UNAUTHENTICATED, { metadata: g.auth('nope') });
      await expectStatus(req, g.status.UNAUTHENTICATED, { metadata: g.auth(`${KEY}x`) });
      const basic = new g.grpc.Metadata();
      basic.set('authorization', KEY);
      await expectStatus(req, g.status.UNAUTHENTICATED, { metadata: basic });
      for (const method of ['ListModels', 'Tokenize']) {
        await assert.rejects(
          g.unary(rpc.generation, method, { text: 'Hi' }, g.auth('nope')),
          (e) => e.code === g.status.UNAUTHENTICATED,
          method,
        );
      }
      for (const key of [KEY, KEY2]) {
        const r = await g.generate(rpc.generation, req, { metadata: g.auth(key) });
        assert.equal(r.usage.completion_tokens, 2);
      }
      const h = await g.unary(rpc.health, 'Check', { service: '' });
      assert.equal(h.status, 'SERVING');
    });

    test('unknown method: UNIMPLEMENTED', async () => {
      const s = await new Promise((resolve) => {
        rpc.raw.makeUnaryRequest('/banyan.v1.Generation/Nope', (b) => b, (b) => b, Buffer.alloc(0), md(), {}, (err) =>
          resolve(err),
        );
      });
      assert.equal(s.code, g.status.UNIMPLEMENTED);
    });
  });

  test('after the bad input the server still serves good requests on both front ends', async () => {
    const r = await post(d, '/v1/completions', { model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 }, { headers: AUTH });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.completion_tokens, 12);
    const gr = await g.generate(rpc.generation, { text: 'Once upon a time', sampling: { max_tokens: 12, temperature: 0 } }, { metadata: md() });
    assert.equal(gr.choices[0].text, r.json.choices[0].text);
    const m = await waitIdle(d, { headers: AUTH });
    assert.equal(value(m, 'banyan_kv_chunks_live'), 0);
    assert.equal(value(m, 'banyan_requests_running'), 0);
    assert.equal(value(m, 'banyan_requests_failed_total'), 0);
  });
});
