#!/usr/bin/env node
/**
 * `tx-outbox`: the command line. One file per command; this one wires them up
 * and owns the exit code.
 */

import { Command } from 'commander';
import { registerCdc } from './cdc.js';
import { packageVersion, reportError, verboseRequested } from './common.js';
import { registerDead } from './dead.js';
import { registerDemo } from './demo/index.js';
import { registerEvent } from './event.js';
import { registerHistory } from './history.js';
import { registerInbox } from './inbox.js';
import { registerMigrate } from './migrate.js';
import { registerPrune } from './prune.js';
import { registerRelay } from './relay.js';
import { registerRoles } from './roles.js';
import { registerStatus } from './status.js';

function buildProgram(): Command {
  const program = new Command('tx-outbox')
    .description(
      'Transactional outbox for PostgreSQL: migrate, relay, status, cdc, dead, event, history, inbox, roles, demo.',
    )
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--verbose', 'print stack traces with errors')
    .showSuggestionAfterError()
    .exitOverride()
    // Errors are printed by reportError, as one line; help and usage go where commander sends them.
    .configureOutput({ outputError: () => undefined });
  registerMigrate(program);
  registerRelay(program);
  registerStatus(program);
  registerCdc(program);
  registerDead(program);
  registerEvent(program);
  registerHistory(program);
  registerInbox(program);
  registerPrune(program);
  registerRoles(program);
  registerDemo(program);
  return program;
}

async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync([...argv]);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    return reportError(error, verboseRequested(argv.slice(2)));
  }
}

process.exit(await main(process.argv));
