export { buildCommand, type ExecutorOptions, runExecutor } from './cli.js';
export { ConfigError, DEFAULT_CONFIG, type ExecutorConfig, loadConfig } from './config.js';
export { ConnectionProcessor } from './connection-processor.js';
export { CAPABILITIES, environmentInfo } from './environment-info.js';
export { DEFAULT_LISTEN_URL, type ListenTarget, ListenUrlError, parseListenUrl } from './listen-url.js';
export { ExecServer, type ExecServerOptions } from './server.js';
export { Session, SessionRegistry } from './session-registry.js';
