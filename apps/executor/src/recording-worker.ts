/**
 * The recording worker (recordings.ts starts one per executor with `--record-dir`, from the executor's dist): the
 * executor's thread posts each session's events, this thread makes, hashes, seals and writes their lines
 * (recording-file.ts) and says what was written or failed. Its writes block this thread alone, which has
 * nothing else to do meanwhile: the executor's thread never waits for it (its queue bound, recordings.ts).
 */
import { createPrivateKey } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import { LineSlab } from '@tether/recording';
import { type RecordingEvent, RecordingFile, type RecordingFileStart } from './recording-file.js';

export interface RecordingWorkerData {
  dir: string;
  /** The recording key (PKCS#8 PEM) and its public half (`ed25519:…`). */
  keyPem: string;
  publicKey: string;
  maxFileBytes: number;
  maxFileAgeMs: number;
  sealEveryMs: number;
}

/** From the executor's thread. */
export type ToWorker =
  | { kind: 'open'; id: number; start: RecordingFileStart }
  | { kind: 'events'; batch: Array<[id: number, event: RecordingEvent]> }
  | { kind: 'close'; id: number };

/** To the executor's thread. */
export type FromWorker =
  | { kind: 'opened'; id: number; path: string }
  | { kind: 'openFailed'; id: number; message: string }
  | { kind: 'written'; id: number; cost: number; bytes: number }
  | { kind: 'failed'; id: number; why: string }
  | { kind: 'closed'; id: number };

const data = workerData as RecordingWorkerData;
const port = parentPort!;
const key = createPrivateKey(data.keyPem);
const files = new Map<number, RecordingFile>();
const post = (message: FromWorker) => port.postMessage(message);

/** The lines of every file of this worker are made in one slab (LineSlab). */
const slab = new LineSlab();
const sealTimer = setInterval(() => {
  for (const file of files.values()) file.sealIfDue();
}, data.sealEveryMs);

port.on('message', (message: ToWorker) => {
  switch (message.kind) {
    case 'open': {
      const { id } = message;
      const file = new RecordingFile(
        message.start,
        key,
        data.publicKey,
        { ...data, slab },
        {
          written: (cost, bytes) => post({ kind: 'written', id, cost, bytes }),
          failed: (why) => post({ kind: 'failed', id, why }),
        },
      );
      try {
        file.open();
      } catch (err) {
        post({ kind: 'openFailed', id, message: (err as Error).message });
        return;
      }
      files.set(id, file);
      post({ kind: 'opened', id, path: file.path });
      return;
    }
    case 'events': {
      const touched = new Set<RecordingFile>();
      for (const [id, event] of message.batch) {
        const file = files.get(id);
        if (file === undefined) continue;
        file.apply(event);
        touched.add(file);
      }
      for (const file of touched) file.flush();
      return;
    }
    case 'close': {
      const file = files.get(message.id);
      files.delete(message.id);
      file?.close();
      post({ kind: 'closed', id: message.id });
      return;
    }
  }
});

// The executor closes the port after the last recording closed.
port.on('close', () => clearInterval(sealTimer));
