// A real gRPC client (@grpc/grpc-js + @grpc/proto-loader) for banyan.v1.Generation and
// grpc.health.v1.Health, loaded from the repository's proto/ folder.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { SOURCE_DIR } = require('./daemon');

const PROTO_DIR = path.join(SOURCE_DIR, 'proto');

const definition = protoLoader.loadSync(
  ['banyan/v1/generation.proto', 'grpc/health/v1/health.proto'],
  {
    includeDirs: [PROTO_DIR],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  },
);
const loaded = grpc.loadPackageDefinition(definition);
const Generation = loaded.banyan.v1.Generation;
const Health = loaded.grpc.health.v1.Health;

// Metadata carrying `authorization: Bearer <key>` (empty metadata without a key).
function auth(key) {
  const md = new grpc.Metadata();
  if (key !== undefined) md.set('authorization', `Bearer ${key}`);
  return md;
}

// Clients for a Daemon's gRPC port.
function clients(daemon) {
  const creds = grpc.credentials.createInsecure();
  return {
    generation: new Generation(daemon.grpcAddr, creds),
    health: new Health(daemon.grpcAddr, creds),
    // For raw bytes (invalid UTF-8, malformed messages): a client without a schema.
    raw: new grpc.Client(daemon.grpcAddr, creds),
    close() {
      this.generation.close();
      this.health.close();
      this.raw.close();
    },
  };
}

// Runs a Generate stream to its end. Resolves { responses, choices, usage, requestIds } where
// choices[i] = { text, token_ids, finish_reason, logprobs }; rejects with the gRPC error
// (err.code, err.details). Options: { metadata, deadlineMs, onResponse(resp, call) }.
function generate(client, request, { metadata = new grpc.Metadata(), deadlineMs, onResponse } = {}) {
  return new Promise((resolve, reject) => {
    const options = deadlineMs === undefined ? {} : { deadline: new Date(Date.now() + deadlineMs) };
    const call = client.Generate(request, metadata, options);
    const responses = [];
    const choices = [];
    let usage = null;
    call.on('data', (resp) => {
      responses.push(resp);
      if (resp.usage) usage = resp.usage;
      for (const c of resp.choices) {
        const ch = (choices[c.index] ||= { text: '', token_ids: [], finish_reason: null, logprobs: [] });
        ch.text += c.text;
        ch.token_ids.push(...c.token_ids);
        ch.logprobs.push(...c.logprobs);
        if (c.finish_reason !== 'FINISH_REASON_UNSPECIFIED') ch.finish_reason = c.finish_reason;
      }
      if (onResponse) onResponse(resp, call);
    });
    call.on('error', reject);
    call.on('end', () => {
      resolve({ responses, choices, usage, requestIds: new Set(responses.map((r) => r.request_id)) });
    });
  });
}

// A unary call as a promise.
function unary(client, method, request, metadata = new grpc.Metadata(), options = {}) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, options, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

// Sends `bytes` (a Buffer: a serialized, possibly invalid, GenerateRequest) to Generate and
// resolves the status it ends with ({ code, details }) and the number of messages received.
function rawGenerate(rawClient, bytes, metadata = new grpc.Metadata()) {
  return new Promise((resolve) => {
    const call = rawClient.makeServerStreamRequest(
      '/banyan.v1.Generation/Generate',
      (b) => b,
      (b) => b,
      bytes,
      metadata,
      {},
    );
    let messages = 0;
    call.on('data', () => ++messages);
    call.on('error', () => {});
    call.on('status', (s) => resolve({ code: s.code, details: s.details, messages }));
  });
}

// Hand-written protobuf wire encoding, for messages protobufjs would refuse to build.
function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) b |= 0x80;
    out.push(b);
  } while (v > 0n);
  return Buffer.from(out);
}
// Field `field` of wire type 2 (length-delimited) holding `bytes`.
function lengthDelimited(field, bytes) {
  return Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
}
// Field `field` of wire type 0 (varint).
function varintField(field, n) {
  return Buffer.concat([varint(field << 3), varint(n)]);
}

module.exports = {
  grpc,
  status: grpc.status,
  auth,
  clients,
  generate,
  unary,
  rawGenerate,
  wire: { varint, lengthDelimited, varintField },
};
