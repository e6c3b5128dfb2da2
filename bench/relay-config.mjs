// What every bench relay process (relay-process.mjs, stall-trace-relay.mjs) takes from its config
// (TXO_BENCH_RELAY, JSON) for createRelay / createCdcRelay, with the bench's defaults.

/** The relay options of `cfg`: schema, batchSize (1000), relayId, leaseMs (5000), history and silenceTimeoutMs when given. */
export function benchRelayOptions(cfg) {
  return {
    schema: cfg.schema,
    batchSize: cfg.batchSize ?? 1000,
    relayId: cfg.relayId,
    leaseMs: cfg.leaseMs ?? 5000,
    ...(cfg.history ? { history: cfg.history } : {}),
    ...(cfg.silenceTimeoutMs ? { silenceTimeoutMs: cfg.silenceTimeoutMs } : {}),
  };
}

/**
 * Starts `relay` and says so on stdout (`{"started":…}`); on SIGTERM stops it (10 s), closes the
 * publisher and the pool, calls `report` (which prints the process's last line) and exits 0.
 */
export async function serveBenchRelay(relay, publisher, pool, report) {
  await relay.start();
  process.stdout.write(`${JSON.stringify({ started: relay.id })}\n`);
  process.on('SIGTERM', async () => {
    await relay.stop({ timeout: 10_000 });
    await publisher.close();
    await pool.end();
    report();
    process.exit(0);
  });
}
