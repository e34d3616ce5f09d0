# shellcheck shell=bash
# Sourced by the scripts that start `knative-ha-webhook serve` on loopback (scripts/measure/attack,
# bench-load, bench-scale and soak, scripts/release/image-smoke): starts it in the background,
# waits until /readyz answers 200 on its metrics port, and stops it when the script exits.
#
# serve_and_wait [-l LOG] [-t SECONDS] [-i SECONDS] [-p PROBE] METRICS_PORT COMMAND...
#   METRICS_PORT  the port of serve's --metrics-listen on 127.0.0.1
#   COMMAND       what runs serve: the binary, or commands that exec it (env, chroot), so that
#                 SERVE_PID is serve's own process
#   -l LOG        serve's stdout and stderr (default: the script's)
#   -t SECONDS    give up after this many whole seconds (default 20; 0: wait as long as it runs)
#   -i SECONDS    the pause between two probes (default 0.1)
#   -p PROBE      a command given METRICS_PORT, true once serve is ready (default serve_ready)
# Sets SERVE_PID. Returns 0 once ready, 1 when serve exited first, 2 when it was not ready in
# time; the caller says what failed, in its own words.
#
# serve_on_exit [CLEANUP]
#   The script's EXIT trap: kills every serve serve_and_wait started that still runs (SIGKILL,
#   then reaps it), then runs CLEANUP (the script's own, as a trap string). INT and TERM exit 130,
#   through it.

SERVE_PIDS=()

serve_ready() { curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$1/readyz"; }

serve_and_wait() {
  local log="" timeout=20 interval=0.1 probe=serve_ready opt OPTIND=1
  while getopts "l:t:i:p:" opt; do
    case $opt in
      l) log=$OPTARG ;;
      t) timeout=$OPTARG ;;
      i) interval=$OPTARG ;;
      p) probe=$OPTARG ;;
      *) return 64 ;;
    esac
  done
  shift $((OPTIND - 1))
  local port=$1 deadline
  shift
  deadline=$(($(date +%s%N) + timeout * 1000000000))
  if [ -n "$log" ]; then "$@" >"$log" 2>&1 & else "$@" & fi
  SERVE_PID=$!
  SERVE_PIDS+=("$SERVE_PID")
  until "$probe" "$port" >/dev/null 2>&1; do
    kill -0 "$SERVE_PID" 2>/dev/null || return 1
    [ "$timeout" = 0 ] || [ "$(date +%s%N)" -lt "$deadline" ] || return 2
    sleep "$interval"
  done
}

serve_stop_all() {
  local pid
  for pid in "${SERVE_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || continue
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

serve_on_exit() {
  # shellcheck disable=SC2064 # the caller's clean-up, fixed now
  trap "serve_stop_all${1:+; $1}" EXIT
  trap 'exit 130' INT TERM
}
