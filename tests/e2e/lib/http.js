// Raw HTTP helpers (fetch) and the official OpenAI client, pointed at a Daemon.
'use strict';

const assert = require('node:assert/strict');
const OpenAI = require('openai');
const { scaled } = require('./daemon');

// The official client, with retries off so that 429 / 503 reach the test as they are; its
// timeout is scaled (E2E_TIME_SCALE) like every other of the suite.
function openaiClient(daemon, { apiKey = 'no-key', timeoutMs = 60000 } = {}) {
  return new OpenAI({
    baseURL: `${daemon.http}/v1`,
    apiKey,
    maxRetries: 0,
    timeout: scaled(timeoutMs),
  });
}

// POSTs `body` (an object is sent as JSON; a string or Buffer as it is) to `path`. Returns
// { status, headers, text, json } (json undefined when the body is not JSON).
async function post(daemon, path, body, { headers = {}, signal } = {}) {
  const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const r = await fetch(daemon.http + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: raw,
    signal,
  });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json };
}

// Asserts an OpenAI-shaped error body {"error":{"message","type","param","code"}}: message a
// non-empty string, type a string, param and code strings or null. Returns the inner object.
function assertErrorBody(json, what = '') {
  assert.ok(json && typeof json === 'object', `${what}: body is not JSON: ${JSON.stringify(json)}`);
  const e = json.error;
  assert.ok(e && typeof e === 'object', `${what}: no "error" object in ${JSON.stringify(json)}`);
  assert.equal(typeof e.message, 'string', `${what}: error.message`);
  assert.ok(e.message.length > 0, `${what}: empty error.message`);
  assert.equal(typeof e.type, 'string', `${what}: error.type`);
  assert.ok('param' in e && (e.param === null || typeof e.param === 'string'), `${what}: error.param`);
  assert.ok('code' in e && (e.code === null || typeof e.code === 'string'), `${what}: error.code`);
  return e;
}

// Reads an SSE response (fetch Response) to its end; returns the parsed `data:` events and
// whether "[DONE]" came last.
async function readSse(response) {
  const text = await response.text();
  const events = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    for (const line of block.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const data = line.slice('data: '.length);
      if (data === '[DONE]') {
        done = true;
      } else {
        assert.equal(done, false, 'an event after [DONE]');
        events.push(JSON.parse(data));
      }
    }
  }
  return { events, done };
}

// Collects an openai streaming completion (completions or chat) into per-choice text and
// finish reasons, plus the usage chunk when one came.
async function collectStream(stream) {
  const texts = [];
  const finish = [];
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const piece = c.text !== undefined ? c.text : c.delta?.content || '';
      texts[c.index] = (texts[c.index] || '') + piece;
      if (c.finish_reason) {
        assert.equal(finish[c.index], undefined, `choice ${c.index} finished twice`);
        finish[c.index] = c.finish_reason;
      }
    }
  }
  return { texts, finish, usage, chunks };
}

// Starts a streaming completion and returns { firstChunk, done } promises: firstChunk resolves
// when the first chunk arrived, done with the collected result.
function startStream(client, body) {
  let gotFirst;
  const firstChunk = new Promise((r) => {
    gotFirst = r;
  });
  const done = (async () => {
    const stream = await client.completions.create({
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    const finish = [];
    let usage = null;
    let sawDone = false;
    for await (const chunk of stream) {
      gotFirst();
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.finish_reason) finish[c.index] = c.finish_reason;
      }
    }
    sawDone = true;
    return { finish, usage, sawDone, endedAt: Date.now() };
  })();
  done.catch(() => gotFirst());
  return { firstChunk, done };
}

module.exports = { openaiClient, post, assertErrorBody, readSse, collectStream, startStream };
