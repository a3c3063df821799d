import {
  createLogger as createPinoLogger,
  DEFAULT_REDACT_PATHS,
  type Logger,
  type LoggerOptions,
  silentLogger,
} from '@tether/telemetry';

export type { Logger };
export { silentLogger };

/** Paths whose values never reach a log line (keys, tokens, signed URLs, process env, output). */
export const REDACT_PATHS = [...DEFAULT_REDACT_PATHS, 'params.env', 'params.chunk'];

/** pino on stderr (stdout belongs to the protocol): JSON, or pretty on a terminal (`format`). */
export function createLogger(level = 'info', format: LoggerOptions['format'] = 'auto'): Logger {
  return createPinoLogger({ component: 'executor', level, format, redact: REDACT_PATHS });
}
