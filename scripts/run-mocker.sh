#!/usr/bin/env bash
# An OpenAI-compatible endpoint on this machine with mcsup alone: etcd, NATS, Dynamo's frontend and
# one aggregated Dynamo mocker worker (simulated engine, tiny local tokenizer, no GPU), from an
# srt-slurm recipe, supervised by mcsup. When mcsup says `servable`, try:
#
#   curl -s localhost:8000/v1/completions -H 'content-type: application/json' \
#        -d '{"model": "'"$PWD"'/.venv-dynamo/tiny-model", "prompt": "hello", "max_tokens": 5}'
#
# Ctrl-C stops it in order (frontend, worker, then etcd and NATS). Uses ports 2379/2380 (etcd),
# 4222 (NATS), 7500 (the worker's system port) and 8000 (the endpoint).
#
#   scripts/run-mocker.sh                # extra arguments go to mcsup run
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

"$REPO_ROOT/scripts/setup.sh"
cargo build --release --locked --bin mcsup
DYNAMO_VENV="${MCSUP_DYNAMO_VENV:-$REPO_ROOT/.venv-dynamo}"
export PATH="$DYNAMO_VENV/bin:$PATH"

work="$(mktemp -d "${TMPDIR:-/tmp}/mcsup-mocker.XXXXXX")"
mkdir -p "$work/configs"
ln -s "$(command -v etcd)" "$work/configs/etcd"
ln -s "$(command -v nats-server)" "$work/configs/nats-server"
# srtctl's upstream recipes/mocker/agg.yaml, on one node of this machine.
cat > "$work/mocker.yaml" <<YAML
name: mocker-local
model: {path: "hf:$DYNAMO_VENV/tiny-model"}
resources: {gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}
frontend: {type: dynamo, enable_multiple_frontends: false}
backend: {type: mocker, speedup_ratio: 100}
dynamo: {request_plane: nats}
environment: {ETCD_ENDPOINTS: "http://127.0.0.1:2379", NATS_SERVER: "nats://127.0.0.1:4222"}
mcsup:
  configs_dir: $work/configs
  log_dir: $work/logs
  node_addresses: {localhost: 127.0.0.1}
YAML
echo "recipe: $work/mocker.yaml; logs: $work/logs"
exec "$REPO_ROOT/target/release/mcsup" run --role agg --recipe "$work/mocker.yaml" \
  --node localhost --nodelist localhost "$@"
