#!/usr/bin/env bash
# The README's main job: a real Mooncake master, a standalone store and two synthetic workers on
# 127.0.0.1 over TCP, supervised by mcsup (recipes/local.yaml). Ctrl-C stops them in order.
#
#   scripts/run-local.sh                 # role agg (aggregated)
#   scripts/run-local.sh --role decode   # extra arguments go to mcsup
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

"$REPO_ROOT/scripts/setup.sh"
export PATH="$REPO_ROOT/.venv/bin:$PATH"
cargo build --release --locked --bin mcsup

role=(--role agg)
for a in "$@"; do
  [ "$a" = "--role" ] && role=()
done
exec "$REPO_ROOT/target/release/mcsup" run "${role[@]}" --recipe recipes/local.yaml "$@"
