#!/usr/bin/env bash
# A real Prometheus answers the Grafana dashboard (src/metrics/grafana-dashboard.json): starts the demo (the built
# router, what `npm start` runs: node dist/src/cli/main.js --demo) and /usr/bin/prometheus scraping the demo's
# /metrics every second (TSDB in a temporary directory, web on 127.0.0.1:9099), waits, asks Prometheus every panel's
# expression over its HTTP API (curl --data-urlencode query=...; $__rate_interval and $downstream substituted), prints
# a Markdown table (panel, expression, series returned, the series with the largest value), and stops both.
#
#   npx tsc -p . && bench/prometheus-dashboard-check.sh [seconds to wait, default 60]
#   PROM_URL=http://127.0.0.1:9090 bench/prometheus-dashboard-check.sh --query-only   # a Prometheus already running
#
# Environment: RATE_INTERVAL (what $__rate_interval becomes, default 30s), DOWNSTREAM (what $downstream becomes, a
# regex, default .*), PROM_PORT (default 9099), PROMETHEUS (default /usr/bin/prometheus). Needs curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."
DASHBOARD=src/metrics/grafana-dashboard.json
RATE_INTERVAL=${RATE_INTERVAL:-30s}
DOWNSTREAM=${DOWNSTREAM:-.*}
PROM_PORT=${PROM_PORT:-9099}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}

query_all() {
  local url=$1
  echo '| panel | expression | series | sample value |'
  echo '|---|---|---|---|'
  jq -r '.panels[] | .title as $t | .targets[] | [$t, .expr] | @tsv' "$DASHBOARD" |
    while IFS=$'\t' read -r title expr; do
      local q=${expr//'$__rate_interval'/$RATE_INTERVAL}
      q=${q//'$downstream'/$DOWNSTREAM}
      local answer
      answer=$(curl -s "$url/api/v1/query" --data-urlencode "query=$q")
      local series sample
      series=$(jq -r 'if .status == "success" then (.data.result | length) else "error: \(.error)" end' <<<"$answer")
      # The series with the largest value (NaN counts as least): its labels (job and instance left out) and value.
      sample=$(jq -r '.data.result | max_by(.value[1] | (tonumber? // -1) | if isnan then -1 else . end) // empty |
        (.metric | del(.__name__, .job, .instance) | to_entries | map("\(.key)=\"\(.value)\"") | join(",")) as $l |
        "{\($l)} \(.value[1])"' <<<"$answer")
      echo "| $title | \`$q\` | $series | \`${sample:--}\` |"
    done
}

if [[ ${1:-} == --query-only ]]; then
  query_all "${PROM_URL:-http://127.0.0.1:$PROM_PORT}"
  exit 0
fi

WAIT_S=${1:-60}
WORK=$(mktemp -d /tmp/geofence-prometheus-XXXXXX)
DEMO_PID=''
PROM_PID=''
cleanup() {
  # SIGTERM drains the demo and ends it (as Ctrl-C would); Prometheus stops on SIGTERM too.
  if [[ -n $DEMO_PID ]]; then kill -TERM "$DEMO_PID" 2>/dev/null || true; fi
  if [[ -n $PROM_PID ]]; then kill -TERM "$PROM_PID" 2>/dev/null || true; fi
  if [[ -n $DEMO_PID ]]; then wait "$DEMO_PID" 2>/dev/null || true; fi
  if [[ -n $PROM_PID ]]; then wait "$PROM_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

node dist/src/cli/main.js --demo >"$WORK/demo.log" 2>"$WORK/demo.err" &
DEMO_PID=$!
# The demo prints the URL of its /metrics (9464 unless that port is taken).
for _ in $(seq 1 120); do
  grep -q '^demo: metrics http' "$WORK/demo.log" && break
  kill -0 "$DEMO_PID" 2>/dev/null || { cat "$WORK/demo.err" >&2; exit 1; }
  sleep 0.5
done
METRICS_URL=$(sed -n 's/^demo: metrics \(http[^ ]*\)$/\1/p' "$WORK/demo.log" | head -1)
[[ -n $METRICS_URL ]] || { echo 'the demo printed no metrics URL' >&2; exit 1; }
TARGET=$(sed -E 's#^http://([^/]+)/metrics$#\1#' <<<"$METRICS_URL")

cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: geofence-demo
    static_configs:
      - targets: ['$TARGET']
EOF
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && break
  kill -0 "$PROM_PID" 2>/dev/null || { cat "$WORK/prometheus.log" >&2; exit 1; }
  sleep 0.5
done
echo "demo /metrics at $METRICS_URL; Prometheus on 127.0.0.1:$PROM_PORT; waiting ${WAIT_S} s" >&2
sleep "$WAIT_S"
up=$(curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode 'query=up{job="geofence-demo"}' |
  jq -r '.data.result[0].value[1] // "none"')
samples=$(curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query" \
  --data-urlencode 'query=count_over_time(up{job="geofence-demo"}[5m])' | jq -r '.data.result[0].value[1] // "0"')
echo "target up: $up; scrapes so far: $samples; \$__rate_interval = $RATE_INTERVAL, \$downstream = $DOWNSTREAM" >&2
query_all "http://127.0.0.1:$PROM_PORT"
