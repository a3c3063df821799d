import pino, { type Logger } from 'pino';

export type { Logger };

/** Paths whose values never reach a log line (keys, tokens, signed URLs, process env). */
export const REDACT_PATHS = [
  'authorization',
  'apiKey',
  'token',
  'env',
  '*.authorization',
  '*.apiKey',
  '*.token',
  '*.env',
  'params.env',
  'params.chunk',
];

/** pino JSON on stderr; stdout belongs to the protocol. */
export function createLogger(level: string = process.env.TETHER_LOG ?? 'info'): Logger {
  return pino(
    { name: 'executor', level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } },
    pino.destination({ fd: 2, sync: true }),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
