# Shared by the scripts that compare two ways of making the same requests on one release larder-server (a role token
# against a signed-in user, a collection without a schema against one with): the server is started once per kind of
# measurement, and the two ways alternate on it, so that both see the same machine at the same moments.
#
# The caller sets `bin` (the release directory), `work` (a scratch directory), `server_args` (an array of
# larder-server options besides --port and --data-dir) and defines `setup` (run once the server listens, with `port`
# set) and `run_case OP WAY LARDER_BENCH_OPTIONS...`.

pid=""

# Starts the server (under "$@", e.g. valgrind) on a fresh data directory and runs `setup`; sets pid and port.
start_server() {
    rm -rf "$work/data" "$work/log"
    "$@" "$bin/larder-server" --port 0 --data-dir "$work/data" "${server_args[@]}" >"$work/log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 600); do
        port=$(sed -n 's/.*listening on tcp:\/\/[^ ]*:\([0-9]*\).*/\1/p' "$work/log" | head -n 1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "Error: the server did not start:" >&2; cat "$work/log" >&2; exit 1; }
    setup
}

stop_server() {
    kill -INT "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

# The server's instructions per request for OP done WAY, under callgrind (started with start_server valgrind ...): 2,000
# requests of warm-up, then 3,000 counted, one connection, one in flight (every answer OK, unless the caller sets
# `errors_allowed`, the share of error answers allowed). Prints a table row. With `profile_dir` set,
# keeps the counted profile there as OP-WAY.callgrind (for callgrind_annotate).
instructions_case() {  # instructions_case OP WAY
    run_case "$1" "$2" -c 1 -P 1 --requests 2000 >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    callgrind_control -i on "$pid" >/dev/null 2>&1
    run_case "$1" "$2" -c 1 -P 1 --requests 3000 --max-error-rate "${errors_allowed:-0}" >/dev/null
    callgrind_control -i off "$pid" >/dev/null 2>&1
    rm -f "$work"/callgrind.*.*
    callgrind_control -d "$pid" >/dev/null 2>&1
    local total
    total=$(cat "$work"/callgrind.*.* | awk '/^totals:/ {print $2; exit}')
    if [ -n "${profile_dir:-}" ]; then cat "$work"/callgrind.*.* >"$profile_dir/$1-$2.callgrind"; fi
    echo "| $1 | $2 | $((total / 3000)) |"
}

# The server's CPU time (utime + stime from /proc) per answered request for OP done WAY: 1 s of warm-up, then
# DURATION seconds at 50 connections with IN_FLIGHT requests in flight each. Prints a table row.
cpu_case() {  # cpu_case ROUND OP WAY IN_FLIGHT DURATION
    local round=$1 op=$2 way=$3 in_flight=$4 duration=$5 before after
    run_case "$op" "$way" -c 50 -P "$in_flight" --duration 1 >/dev/null
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    run_case "$op" "$way" -c 50 -P "$in_flight" --duration "$duration" --json >"$work/out"
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    python3 - "$round" "$op" "$way" "$before" "$after" "$(getconf CLK_TCK)" "$work/out" <<'PY'
import json, sys
rnd, op, way, before, after, hz, path = sys.argv[1:8]
result = json.load(open(path))
cpu = (int(after) - int(before)) / int(hz)
note = f" ({result['errors']} errors)" if result["errors"] else ""
print(f"| {rnd} | {op} | {way} | {result['opsPerSec']:,.0f}{note} | {cpu / result['count'] * 1e6:.1f} |")
PY
}
