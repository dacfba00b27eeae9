// Tests of behaviour the server gets wrong today carry `todo: knownBug('why')`: they still run
// and report, but do not fail the suite while the bug is open. E2E_STRICT=1 runs them as
// ordinary tests (for whoever fixes the bug); remove the marker with the fix.
'use strict';

function knownBug(reason) {
  return process.env.E2E_STRICT === '1' ? false : `known bug: ${reason}`;
}

module.exports = { knownBug };
