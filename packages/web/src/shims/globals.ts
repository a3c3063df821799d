/**
 * The few globals of Node that the shared client code names, for the browser bundle (injected by
 * scripts/build.mjs wherever a module uses one). Buffer is the `buffer` package (a Uint8Array subclass, pure
 * JavaScript); `process` carries no environment (no proxy variables: the browser has its own proxy settings).
 */
import { Buffer } from 'buffer';

export { Buffer };

const channel = new MessageChannel();
const pending = new Map<number, () => void>();
let lastId = 0;
channel.port1.onmessage = (event: MessageEvent<number>) => {
  const task = pending.get(event.data);
  pending.delete(event.data);
  task?.();
};

/** A macrotask without setTimeout's 4 ms clamp on nested calls; its id cancels it (`clearImmediate`). */
export function setImmediate<A extends unknown[]>(callback: (...args: A) => void, ...args: A): number {
  const id = ++lastId;
  pending.set(id, () => callback(...args));
  channel.port2.postMessage(id);
  return id;
}

export function clearImmediate(id: number | null | undefined): void {
  if (id != null) pending.delete(id);
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
