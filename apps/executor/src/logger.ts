import { createLogger as createPinoLogger, DEFAULT_REDACT_PATHS, type Logger, silentLogger } from '@tether/telemetry';

export type { Logger };
export { silentLogger };

/** Paths whose values never reach a log line (keys, tokens, signed URLs, process env, output). */
export const REDACT_PATHS = [...DEFAULT_REDACT_PATHS, 'params.env', 'params.chunk'];

/** pino JSON on stderr; stdout belongs to the protocol. */
export function createLogger(level: string = process.env.TETHER_LOG ?? 'info'): Logger {
  return createPinoLogger({ name: 'executor', level, redact: REDACT_PATHS });
}
