export { createLogger, DEFAULT_REDACT_PATHS, type Logger, type LoggerOptions, silentLogger } from './logger.js';
export {
  DURATION_BUCKETS_SECONDS,
  type OtlpHttpExporterConfig,
  Telemetry,
  type TelemetryOptions,
} from './telemetry.js';
