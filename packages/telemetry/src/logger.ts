import pino, { type Logger } from 'pino';

export type { Logger };

export interface LoggerOptions {
  /** `name` field of every line. */
  name: string;
  level?: string;
  /** Paths (pino redact syntax) whose values are replaced with `[redacted]`. */
  redact?: readonly string[];
  /** File descriptor to write to (default 2: stdout may belong to a protocol). */
  fd?: number;
  /** Write here instead of `fd` (tests, in-process sinks). */
  destination?: pino.DestinationStream;
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

/** pino JSON lines, synchronous (nothing is lost when the process exits), with redaction. */
export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      name: options.name,
      level: options.level ?? 'info',
      redact: { paths: [...(options.redact ?? DEFAULT_REDACT_PATHS)], censor: '[redacted]' },
    },
    options.destination ?? pino.destination({ fd: options.fd ?? 2, sync: true }),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
