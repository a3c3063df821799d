import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

// CommonJS, evaluated in a worker thread: its own connection runs passive checkpoints, which copy committed WAL
// frames into the database file (and fsync) without blocking the writer's event loop. Passive checkpoints never
// take the write lock, so they cannot stall the registry's commits (nor can they reset the WAL: see sqlite.ts).
const SOURCE = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.path);
db.pragma('busy_timeout = 5000');
db.pragma('synchronous = NORMAL');
const checkpoint = () => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {}
};
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on('message', () => {
  clearInterval(timer);
  checkpoint();
  db.close();
  parentPort.close();
});
parentPort.postMessage('ready');
`;

export interface Checkpointer {
  /** Stops the worker after a last checkpoint; resolves once it has exited. */
  stop(): Promise<void>;
}

/**
 * Checkpoints `path`'s WAL every `intervalMs` from a worker thread. `onReady` runs once the worker has its
 * connection (the caller then turns its own automatic checkpoints off); `onGone` if the worker fails or exits
 * before stop() (the caller turns them back on).
 */
export function startCheckpointer(
  path: string,
  intervalMs: number,
  hooks: { onReady(): void; onGone(): void },
): Checkpointer {
  const worker = new Worker(SOURCE, {
    eval: true,
    workerData: {
      path,
      intervalMs,
      module: createRequire(import.meta.url).resolve('better-sqlite3'),
    },
  });
  worker.unref();
  let stopping = false;
  const exited = new Promise<void>((resolve) => {
    worker.once('exit', () => {
      if (!stopping) hooks.onGone();
      resolve();
    });
  });
  worker.once('message', () => {
    if (!stopping) hooks.onReady();
  });
  worker.on('error', () => {}); // followed by 'exit', which restores the caller's own checkpoints
  return {
    async stop() {
      stopping = true;
      worker.ref(); // an unref'd worker would let the process exit before the last checkpoint
      worker.postMessage('stop');
      await exited;
    },
  };
}
