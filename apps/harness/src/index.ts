export { type CliIo, run, VERSION } from './cli.js';
export { type CopyOptions, type CopyStats, copy, type Endpoint, sha256Of } from './copy.js';
export { type ConnectFlags, ENV, type Location, openEnvironment, parseLocation } from './target.js';
