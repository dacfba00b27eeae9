// Reads banyand's Prometheus text from GET /metrics.
'use strict';

// Parses Prometheus text exposition into a Map from "name" or "name{labels}" (as written) to
// the number.
function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    // The value is the last space-separated field (no timestamps are written).
    const space = line.lastIndexOf(' ');
    if (space < 0) continue;
    const key = line.slice(0, space);
    const value = Number(line.slice(space + 1));
    out.set(key, value);
  }
  return out;
}

// Fetches and parses /metrics of a Daemon. `headers` for a daemon with API keys.
async function scrape(daemon, headers = {}) {
  const r = await fetch(`${daemon.http}/metrics`, { headers });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}: ${text}`);
  return parseMetrics(text);
}

// The value of an unlabelled sample; throws when it is missing, so a renamed metric fails
// loudly rather than reading as 0.
function value(metrics, name) {
  if (!metrics.has(name)) throw new Error(`metric ${name} is missing from /metrics`);
  return metrics.get(name);
}

// The sum of every sample of a labelled counter (`name{...}`), filtered by `labels` (an object
// of label values, e.g. {reason: 'queue_full'}); 0 when none has been written yet.
function total(metrics, name, labels = {}) {
  let sum = 0;
  for (const [key, v] of metrics) {
    if (!key.startsWith(`${name}{`)) continue;
    const ok = Object.entries(labels).every(([k, want]) => key.includes(`${k}="${want}"`));
    if (ok) sum += v;
  }
  return sum;
}

module.exports = { parseMetrics, scrape, total, value };

// Waits until no request runs or waits (the counters settle a moment after a response ends)
// and returns the metrics then. Throws after `timeoutMs`.
async function waitIdle(daemon, { headers = {}, timeoutMs = 2000 } = {}) {
  const limit = require('./daemon').scaled(timeoutMs);
  const deadline = Date.now() + limit;
  for (;;) {
    const m = await scrape(daemon, headers);
    if (value(m, 'banyan_requests_running') === 0 && value(m, 'banyan_requests_waiting') === 0) return m;
    if (Date.now() > deadline) {
      throw new Error(
        `requests still running ${limit} ms later: running ${value(m, 'banyan_requests_running')}, ` +
          `waiting ${value(m, 'banyan_requests_waiting')}`,
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

module.exports.waitIdle = waitIdle;
