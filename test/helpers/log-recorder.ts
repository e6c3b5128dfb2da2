import type { Logger } from '../../src/logger.js';

export interface LogLine {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly obj: Record<string, unknown>;
}

/** A Logger that keeps every line, for unit tests of what a module says. */
export function logRecorder(): { lines: LogLine[]; logger: Logger } {
  const lines: LogLine[] = [];
  const at =
    (level: LogLine['level']) =>
    (obj: object, msg = '') => {
      lines.push({ level, msg, obj: obj as Record<string, unknown> });
    };
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}
