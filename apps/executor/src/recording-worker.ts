/**
 * The recording worker (recordings.ts starts one per executor with `--record-dir`, from the executor's dist): the
 * executor's thread posts each session's events, this thread makes, hashes, seals and writes their lines
 * (recording-file.ts) and says what was written or failed.
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
      file.open().then(
        () => {
          files.set(id, file);
          post({ kind: 'opened', id, path: file.path });
        },
        (err: Error) => post({ kind: 'openFailed', id, message: err.message }),
      );
      return;
    }
    case 'events':
      for (const [id, event] of message.batch) files.get(id)?.apply(event);
      return;
    case 'close': {
      const file = files.get(message.id);
      files.delete(message.id);
      const closed = () => post({ kind: 'closed', id: message.id });
      if (file === undefined) closed();
      else void file.close().then(closed);
      return;
    }
  }
});

// The executor closes the port after the last recording closed.
port.on('close', () => clearInterval(sealTimer));
