import type { WriteStatus } from '@tether/client';
import type { CliIo } from '../common.js';

/** Stdin bytes sent and not yet answered, at most (the executor queues 1 MiB per child). */
export const STDIN_UNANSWERED_BYTES = 1024 * 1024;

/** Where the input goes: a process this session started, or a detached one it attached to. */
export interface StdinTarget {
  readonly processId: string;
  write(chunk: Buffer): Promise<WriteStatus>;
  closeStdin(): Promise<WriteStatus>;
}

/** Watches the keyboard for the detach keys (`harness attach`); `forward` is what goes on to the process. */
export interface KeyWatcher {
  feed(chunk: Buffer): { forward: Buffer; detach: boolean };
}

export interface ForwardInputOptions {
  /** Stdin's end closes the process's stdin. */
  closeAtEnd: boolean;
  /** Stdin was put in raw mode for this: the cleanup puts it back. */
  rawMode: boolean;
  /** The detach keys end the input (and call `onDetachKeys`) instead of reaching the process. */
  keys?: { watcher: KeyWatcher; onDetachKeys: () => void };
  /** Says why input stopped early (the process takes no more). */
  note?: (text: string) => void;
}

/**
 * Keyboard or piped input to the process. Writes are pipelined, in order (the executor applies them in the
 * order they arrive), with at most STDIN_UNANSWERED_BYTES unanswered: stdin pauses beyond it, so memory stays
 * bounded whatever is piped in, and the executor, which queues up to 1 MiB for a child that reads slowly,
 * never has to refuse one. One write at a time would wait a round trip through the relay per 64 KiB. The
 * close follows the last write's answer. Answers the cleanup, after which stdin stays paused: an answer
 * that comes later must not start reading it again (a reading TTY keeps the harness from exiting).
 */
export function forwardInput(target: StdinTarget, io: CliIo, options: ForwardInputOptions): () => void {
  const writes = new Set<Promise<void>>();
  let unanswered = 0;
  let stopped = false;
  const stop = () => {
    stopped = true;
    io.stdin.off('data', onData);
  };
  const send = (chunk: Buffer) => {
    if (chunk.byteLength === 0) return;
    unanswered += chunk.byteLength;
    const write: Promise<void> = target
      .write(chunk)
      .then((status) => {
        if (status === 'accepted') return;
        if (!stopped) options.note?.(`${target.processId} takes no more input (${status})`);
        stop();
      })
      .catch(stop)
      .finally(() => {
        writes.delete(write);
        unanswered -= chunk.byteLength;
        if (!stopped && unanswered < STDIN_UNANSWERED_BYTES && io.stdin.isPaused()) io.stdin.resume();
      });
    writes.add(write);
    if (unanswered >= STDIN_UNANSWERED_BYTES) io.stdin.pause();
  };
  const onData = (chunk: Buffer) => {
    if (stopped) return;
    const keys = options.keys;
    if (keys === undefined) {
      send(chunk);
      return;
    }
    const { forward, detach } = keys.watcher.feed(chunk);
    send(forward);
    if (detach) {
      stop();
      keys.onDetachKeys();
    }
  };
  const onEnd = () => {
    if (!options.closeAtEnd) return;
    void Promise.all(writes)
      .then(() => (stopped ? undefined : target.closeStdin()))
      .catch(() => undefined);
  };
  io.stdin.on('data', onData);
  io.stdin.once('end', onEnd);
  io.stdin.resume();
  return () => {
    stop();
    io.stdin.off('end', onEnd);
    if (options.rawMode) io.stdin.setRawMode?.(false);
    io.stdin.pause();
  };
}
