/** `util.inspect` looks this symbol up; using Symbol.for keeps the module free of node:util. */
export const INSPECT = Symbol.for('nodejs.util.inspect.custom');
export const REDACTED = '[redacted]';
