export {
  DEFAULT_OTLP_HTTP_ENDPOINT,
  type OtelEnv,
  type OtelEnvSettings,
  otelEnvSettings,
  serviceTelemetryOptions,
  TelemetryConfigError,
} from './env.js';
export { createLogger, DEFAULT_REDACT_PATHS, type Logger, type LoggerOptions, silentLogger } from './logger.js';
export type { OtlpHttpExporterConfig, TelemetryOptions, Temporality } from './options.js';
export {
  DURATION_BUCKETS_SECONDS,
  type Observe,
  type ObservedInstrument,
  PROMETHEUS_CONTENT_TYPE,
  Telemetry,
} from './telemetry.js';
