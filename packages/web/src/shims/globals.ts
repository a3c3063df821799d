/**
 * The few globals of Node that the shared client code names, for the browser bundle (injected by
 * scripts/build.mjs wherever a module uses one). Buffer is the `buffer` package (a Uint8Array subclass, pure
 * JavaScript); `process` carries no environment (no proxy variables: the browser has its own proxy settings).
 */
import { Buffer } from 'buffer';

export { Buffer };

const channel = new MessageChannel();
const queue: Array<() => void> = [];
channel.port1.onmessage = () => {
  const task = queue.shift();
  task?.();
};

/** A macrotask without setTimeout's 4 ms clamp on nested calls. */
export function setImmediate<A extends unknown[]>(callback: (...args: A) => void, ...args: A): void {
  queue.push(() => callback(...args));
  channel.port2.postMessage(null);
}

export const process = {
  env: {} as Record<string, string | undefined>,
  platform: 'browser',
  versions: {} as Record<string, string>,
  emitWarning(warning: string | Error): void {
    console.warn(warning);
  },
  nextTick<A extends unknown[]>(callback: (...args: A) => void, ...args: A): void {
    queueMicrotask(() => callback(...args));
  },
};
