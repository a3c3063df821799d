/**
 * One relay node's forwarding load in a process of its own, forked by relay-nodes.ts so that three nodes' loads
 * run in parallel rather than taking turns on one event loop. Driven over the IPC channel:
 *
 *   {init, relayUrl, keyPem} → {ready}   the relay to load and the key to sign its URLs with
 *   {pair, streams}          → {paired}  one environment socket and `streams` harness streams on it
 *   {go, mib}                → {done, bytes, seconds}  a windowed transfer environment → harnesses
 *   {unpair}                 → {unpaired}
 *   {exit}                                exits
 *
 * Any failure answers {error, message} and exits 1.
 */

import { type SigningKey, signingKeyFromPem } from '@tether/relay-auth';
import { type Pairing, transfer, viaRelay } from './relay-kit.js';

export type LoadRequest =
  | { type: 'init'; relayUrl: string; keyPem: string }
  | { type: 'pair'; streams: number }
  | { type: 'go'; mib: number }
  | { type: 'unpair' }
  | { type: 'exit' };

export type LoadAnswer =
  | { type: 'ready' }
  | { type: 'paired' }
  | { type: 'done'; bytes: number; seconds: number }
  | { type: 'unpaired' }
  | { type: 'error'; message: string };

const send = (answer: LoadAnswer) => process.send?.(answer);

let relayUrl = '';
let key: SigningKey | null = null;
let pairing: Pairing | null = null;

async function handle(request: LoadRequest): Promise<void> {
  switch (request.type) {
    case 'init':
      relayUrl = request.relayUrl;
      key = signingKeyFromPem(request.keyPem);
      return void send({ type: 'ready' });
    case 'pair':
      if (!key) throw new Error('pair before init');
      pairing = await viaRelay(key, relayUrl, request.streams);
      return void send({ type: 'paired' });
    case 'go': {
      if (!pairing) throw new Error('go before pair');
      const { bytes, seconds } = await transfer(pairing, request.mib);
      return void send({ type: 'done', bytes, seconds });
    }
    case 'unpair':
      await pairing?.close();
      pairing = null;
      return void send({ type: 'unpaired' });
    case 'exit':
      process.disconnect?.();
      process.exit(0);
  }
}

if (!process.send) {
  process.stderr.write('relay-load.ts is forked by relay-nodes.ts (it takes its orders over IPC)\n');
  process.exit(2);
}
process.on('message', (request: LoadRequest) => {
  handle(request).catch((err: unknown) => {
    send({ type: 'error', message: (err as Error).stack ?? String(err) });
    process.exitCode = 1;
    setImmediate(() => process.exit(1));
  });
});
// The bench went away without saying exit: so does this load.
process.on('disconnect', () => process.exit(0));
