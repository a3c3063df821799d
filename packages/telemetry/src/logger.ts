import { createRequire } from 'node:module';
import { hostname } from 'node:os';
import { isatty } from 'node:tty';
import pino, { type Logger } from 'pino';

export type { Logger };

// A type only: the CLI helper (which the harness bundles) must not load pino.
import type { LogFormat } from './cli-env.js';

export type { LogFormat };

export interface LoggerOptions {
  /** `component` field of every line, the same key in every service: `registry`, `relay`, `executor`, … */
  component?: string;
  /** Older spelling: also written as pino's `name` field; `component` defaults to it. */
  name?: string;
  level?: string;
  /** Paths (pino redact syntax) whose values are replaced with `[redacted]`. */
  redact?: readonly string[];
  /** File descriptor to write to (default 2: stdout may belong to a protocol). */
  fd?: number;
  /** Write here instead of `fd` (tests, in-process sinks); always JSON. */
  destination?: pino.DestinationStream;
  /** Default `auto`: pretty when `fd` is a terminal, JSON otherwise. */
  format?: LogFormat;
}

/** Values under these keys never reach a log line: credentials and process environments. */
export const DEFAULT_REDACT_PATHS: readonly string[] = [
  'authorization',
  'apiKey',
  'token',
  'env',
  '*.authorization',
  '*.apiKey',
  '*.token',
  '*.env',
];

/** Whether lines to `fd` would be pretty under `format`. */
export function isPretty(format: LogFormat, fd: number): boolean {
  return format === 'pretty' || (format === 'auto' && isatty(fd));
}

/**
 * pino lines, synchronous (nothing is lost when the process exits), with redaction: JSON, or pino-pretty's
 * lines on a terminal. Redaction happens before either, so a pretty line hides what a JSON line hides.
 */
export function createLogger(options: LoggerOptions): Logger {
  const component = options.component ?? options.name;
  const fd = options.fd ?? 2;
  const settings: pino.LoggerOptions = {
    level: options.level ?? 'info',
    base: {
      pid: process.pid,
      hostname: hostname(),
      ...(component === undefined ? {} : { component }),
      ...(options.name === undefined ? {} : { name: options.name }),
    },
    redact: { paths: [...(options.redact ?? DEFAULT_REDACT_PATHS)], censor: '[redacted]' },
  };
  if (options.destination) return pino(settings, options.destination);
  if (isPretty(options.format ?? 'auto', fd)) return pino(settings, prettyStream(fd, component));
  return pino(settings, pino.destination({ fd, sync: true }));
}

/** pino-pretty as an in-process synchronous stream (no worker thread), loaded only when used. */
function prettyStream(fd: number, component: string | undefined): pino.DestinationStream {
  const build = createRequire(import.meta.url)('pino-pretty') as (
    options: Record<string, unknown>,
  ) => pino.DestinationStream;
  return build({
    destination: fd,
    sync: true,
    colorize: isatty(fd),
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,component,name',
    ...(component === undefined ? {} : { messageFormat: '[{component}] {msg}' }),
  });
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
