/**
 * `@tether/telemetry/cli`: the flag and variable scheme every Tether CLI speaks (cli-env.ts), the values they
 * spell alike (cli-values.ts), and what the service CLIs, registry and relay, are built of (cli-service.ts).
 */
export * from './cli-env.js';
export * from './cli-service.js';
export { listArg, positiveInteger } from './cli-values.js';
