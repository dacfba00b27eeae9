# Sourced by the serve bench's scripts (POSIX sh and bash):
#   banyand_port PID LOG SECONDS
# waits until the banyand of PID, started with --http-port 0 and its output sent to LOG, logs
# that it is ready ("serving model ... HTTP http://HOST:PORT"), and sets `port`. Returns 1, with
# the log on stderr, when the daemon exits first or SECONDS pass. LOG need not exist yet: the
# daemon's redirection opens it only once its background job runs.
banyand_port() {
  _bp_pid=$1 _bp_log=$2 _bp_tries=$(($3 * 10))
  port=
  while [ "$_bp_tries" -gt 0 ]; do
    port=$(sed -n 's/.*serving model.*HTTP http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$_bp_log" \
      2>/dev/null)
    [ -n "$port" ] && return 0
    if ! kill -0 "$_bp_pid" 2>/dev/null; then
      echo "banyand exited before becoming ready:" >&2
      cat "$_bp_log" >&2 2>/dev/null
      return 1
    fi
    sleep 0.1
    _bp_tries=$((_bp_tries - 1))
  done
  echo "banyand did not become ready in $3 s:" >&2
  cat "$_bp_log" >&2 2>/dev/null
  return 1
}
