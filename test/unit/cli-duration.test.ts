import { Command } from 'commander';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { registerCdc } from '../../src/cli/cdc.js';
import { CliError } from '../../src/cli/common.js';
import { registerDead } from '../../src/cli/dead.js';
import { parseSince } from '../../src/cli/dead-filter.js';
import { demoDuration, registerDemo } from '../../src/cli/demo/index.js';
import { durationOption, parseDuration, RETENTION, TIMER } from '../../src/cli/duration.js';
import { registerEvent } from '../../src/cli/event.js';
import { registerHistory } from '../../src/cli/history.js';
import { registerInbox } from '../../src/cli/inbox.js';
import { registerMigrate } from '../../src/cli/migrate.js';
import { pruneOptionsFromFlags, registerPrune } from '../../src/cli/prune.js';
import { registerRelay } from '../../src/cli/relay.js';
import { registerRoles } from '../../src/cli/roles.js';
import { registerStatus } from '../../src/cli/status.js';

afterEach(() => vi.restoreAllMocks());

function program(): Command {
  const p = new Command('tx-outbox').exitOverride();
  for (const register of [
    registerMigrate,
    registerRelay,
    registerStatus,
    registerCdc,
    registerDead,
    registerEvent,
    registerHistory,
    registerInbox,
    registerPrune,
    registerRoles,
    registerDemo,
  ]) {
    register(p);
  }
  return p;
}

function commands(root: Command): Command[] {
  return [root, ...root.commands.flatMap(commands)];
}

/** The options `args` give the subcommand `name` (parsed, its action not run). */
function parsed(name: string, args: string[]): Record<string, unknown> {
  const command = program().commands.find((c) => c.name() === name)!;
  command.exitOverride();
  command.parseOptions(args);
  return command.opts();
}

describe('<duration>: one convention for every duration on the command line', () => {
  it('takes ms, s, m, h and d, and a bare number as ms', () => {
    expect(['500ms', '5s', '2m', '12h', '7d', '1500'].map((v) => parseDuration('--x', v))).toEqual([
      500, 5000, 120_000, 43_200_000, 604_800_000, 1500,
    ]);
    expect(parseDuration('--x', ' 3s ')).toBe(3000);
  });

  it('refuses anything else, naming the flag, with a usage error', () => {
    for (const bad of ['', 'soon', '5 s', '1.5s', '-1s', '5w', '0', '0s']) {
      expect(() => parseDuration('--x', bad)).toThrow(CliError);
    }
    expect(() => parseDuration('--x', 'soon')).toThrow(/^--x needs a duration such as 500ms, 5s, 2m or 12h/);
    expect(() => parseDuration('--x', '0s')).toThrow(
      /^--x 0s is out of range: give a duration from 1ms to 36500d$/,
    );
    expect(() => parseDuration('--x', `${2 ** 60}d`)).toThrow(/out of range/);
  });

  it('a retention flag wants its unit: a bare number there is refused, not read as ms', () => {
    expect(parseDuration('--older-than', '30d', RETENTION)).toBe(2_592_000_000);
    expect(() => parseDuration('--older-than', '30', RETENTION)).toThrow(
      /^--older-than needs a duration such as 7d, 12h or 30m$/,
    );
    expect(() => pruneOptionsFromFlags({ schema: 'outbox', olderThan: '30' } as never)).toThrow(
      /--older-than needs a duration/,
    );
    expect(pruneOptionsFromFlags({ schema: 'outbox', budget: '1500' } as never)).toMatchObject({
      budgetMs: 1500,
    });
    expect(() => parseSince('30')).toThrow(/--since needs an ISO time/);
    expect(parseSince('2h', new Date(7_200_000)).getTime()).toBe(0);
  });

  it('a timer flag stops at what a Node.js timer takes', () => {
    expect(parseDuration('--heartbeat', '24d', TIMER)).toBe(2_073_600_000);
    expect(() => parseDuration('--heartbeat', '25d', TIMER)).toThrow(
      /^--heartbeat 25d is out of range: give a duration from 1ms to 2147483647ms$/,
    );
    expect(durationOption({ min: 300 })('300')).toBe(300);
    expect(() => durationOption({ min: 300 })('299')).toThrow(
      'It is out of range: give a duration from 300ms to 36500d.',
    );
  });

  it('relay --poll-interval, --lease and --gap-grace take a <duration>, and their old bare ms still', () => {
    expect(
      parsed('relay', ['--poll-interval', '100', '--lease', '3000', '--gap-grace', '10000']),
    ).toMatchObject({
      pollInterval: 100,
      lease: 3000,
      gapGrace: 10_000,
    });
    expect(
      parsed('relay', ['--poll-interval', '500ms', '--lease', '15s', '--gap-grace', '1m']),
    ).toMatchObject({
      pollInterval: 500,
      lease: 15_000,
      gapGrace: 60_000,
    });
    expect(() => parsed('relay', ['--lease', '200ms'])).toThrow(/--lease <duration>.*out of range/);
  });

  it('demo --duration: a <duration>; a bare number is still seconds, with a deprecation warning', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    expect(demoDuration('2m')).toBe(120);
    expect(demoDuration('1500ms')).toBe(1.5);
    expect(warn).not.toHaveBeenCalled();
    expect(demoDuration('20')).toBe(20);
    expect(String(warn.mock.calls[0]![0])).toMatch(/a bare number of seconds is deprecated, write 20s/);
    expect(warn.mock.calls[0]![1]).toMatchObject({ type: 'DeprecationWarning' });
    expect(() => demoDuration('2h')).toThrow(/out of range/);
  });

  it('no flag of any command says <ms> or <s>: every duration flag is a <duration>', () => {
    const timeWords = /interval|timeout|lease|grace|heartbeat|older-than|horizon|budget|duration/;
    const seen: string[] = [];
    for (const command of commands(program())) {
      for (const option of command.options) {
        expect(option.flags, `${command.name()} ${option.flags}`).not.toMatch(/<(ms|s|seconds)>/);
        if (option.long !== undefined && timeWords.test(option.long)) {
          expect(option.flags, `${command.name()} ${option.flags}`).toMatch(/<duration>$/);
          seen.push(option.long);
        }
      }
    }
    expect(seen).toEqual(
      expect.arrayContaining([
        '--poll-interval',
        '--lease',
        '--gap-grace',
        '--heartbeat',
        '--budget',
        '--duration',
      ]),
    );
  });
});
