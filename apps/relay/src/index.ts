export { peekHeader, streamKey } from '@tether/relay-frames';
export {
  createRelay,
  type Direction,
  type HeartbeatConfig,
  type Relay,
  type RelayOptions,
  type RelayStats,
} from './app.js';
export { CLOSE, DEFAULT_LIMITS, type RelayLimits } from './limits.js';
export { DROP_REASONS, REFUSAL_REASONS, RESET_REASONS } from './metrics.js';
export { PushSources, type Resolver } from './push-sources.js';
