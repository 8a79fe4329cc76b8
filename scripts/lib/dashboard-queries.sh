# Sourced by the query benchmarks (scripts/bench-queries,
# scripts/bench-block-queries, scripts/bench-queries-under-ingest): the
# dashboard queries of issue 36 and how they are timed. Needs WORK and
# die from the caller.
#
# QUERIES: name;kind;query;step, kind range or instant.
# time_queries <receiver> <port> <start> <end> <runs> <tag>: each query
#   once (its answer kept in $WORK/<receiver>.<tag>.<name>.json), then
#   <runs> times; the median wall time of the HTTP request goes to
#   TIME[<receiver>,<tag>,<name>]. Range queries run from start to end,
#   instant ones at end.
# check_answers <tag> <keys...>: compare-answers.py over the kept answers
#   of sluice, prom and vm.

QUERIES=(
  'rate-sum;range;sum by (job) (rate(http_requests_total[5m]));15'
  'count-regex-name;range;count by (job) ({__name__=~"node_.*_total"});15'
  'topk-max;range;topk(5, max by (instance) (node_load1));15'
  'avg-over-time;range;avg_over_time(temperature_celsius[10m]);60'
  'rate-regex-label;range;sum by (job) (rate(http_requests_total{mode=~"idle|user"}[5m]));60'
  'ratio;range;sum by (instance) (rate(http_request_errors_total[5m])) / sum by (instance) (rate(http_requests_total[5m]));60'
  'max-over-1h;instant;max by (region) (max_over_time(node_load1[1h]));0'
  'count-all;instant;count by (__name__) ({__name__=~".+"});0'
)

declare -A TIME
time_queries() {
  local name=$1 port=$2 start=$3 end=$4 runs=$5 tag=$6 entry key kind q step url args t times
  for entry in "${QUERIES[@]}"; do
    IFS=';' read -r key kind q step <<<"$entry"
    if [ "$kind" = range ]; then
      url="http://127.0.0.1:$port/api/v1/query_range"
      args=(--data-urlencode "start=$start" --data-urlencode "end=$end" --data-urlencode "step=$step")
    else
      url="http://127.0.0.1:$port/api/v1/query"
      args=(--data-urlencode "time=$end")
    fi
    curl -fsS -o "$WORK/$name.$tag.$key.json" "$url" --data-urlencode "query=$q" "${args[@]}" \
      || die "$name failed $q"
    times=()
    for _ in $(seq 1 "$runs"); do
      t=$(curl -fsS -o /dev/null -w '%{time_total}' "$url" --data-urlencode "query=$q" "${args[@]}") \
        || die "$name failed $q"
      times+=("$t")
    done
    TIME[$name,$tag,$key]=$(printf '%s\n' "${times[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  done
}

query_keys() {
  local entry
  for entry in "${QUERIES[@]}"; do echo "${entry%%;*}"; done
}

check_answers() {
  local tag=$1
  python3 "$(dirname "${BASH_SOURCE[0]}")/compare-answers.py" "$WORK" "$tag" $(query_keys)
}
