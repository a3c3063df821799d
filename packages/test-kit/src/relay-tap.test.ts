import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { type RelayTap, startRelayTap } from './relay-tap.js';

/** A stand-in relay: echoes each message back with its type, says which path it got, refuses `/refuse`. */
let relay: WebSocketServer;
const relaySockets = new Set<WebSocket>();
const relayCloses: { code: number; reason: string }[] = [];
let tap: RelayTap;

beforeAll(async () => {
  relay = new WebSocketServer({
    host: '127.0.0.1',
    port: 0,
    verifyClient: (info, done) => (info.req.url?.startsWith('/refuse') ? done(false, 401) : done(true)),
  });
  relay.on('connection', (socket, req) => {
    relaySockets.add(socket);
    socket.send(`hello ${req.url}`);
    socket.on('message', (data: Buffer, binary) => socket.send(data, { binary }));
    socket.on('close', (code, reason) => {
      relaySockets.delete(socket);
      relayCloses.push({ code, reason: reason.toString() });
    });
  });
  await once(relay, 'listening');
  tap = await startRelayTap();
});
afterAll(async () => {
  await tap.close();
  for (const socket of relaySockets) socket.terminate();
  await new Promise((resolve) => relay.close(resolve));
});

function open(path: string): Promise<{ socket: WebSocket; messages: { data: Buffer; binary: boolean }[] }> {
  const socket = new WebSocket(`${tap.url}${path}`);
  const messages: { data: Buffer; binary: boolean }[] = [];
  socket.on('message', (data: Buffer, binary) => messages.push({ data, binary }));
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve({ socket, messages }));
    socket.once('error', reject);
  });
}

const until = async (check: () => boolean) => {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(check()).toBe(true);
};

describe('startRelayTap', () => {
  it('refuses upgrades with 503 until it has a target', async () => {
    const socket = new WebSocket(`${tap.url}/ws/environment/x`);
    socket.on('error', () => undefined);
    const [, response] = await once(socket, 'unexpected-response');
    expect(response.statusCode).toBe(503);
    socket.terminate();
    tap.setTarget(`ws://127.0.0.1:${(relay.address() as AddressInfo).port}`);
  });

  it('forwards both ways unchanged with path and query, records every payload, and can find plain text', async () => {
    const { socket, messages } = await open('/ws/environment/e1?role=harness&sig=abc');
    socket.send('plain-text-marker-7f3a');
    socket.send(Buffer.from([0, 1, 2, 255]));
    await until(() => messages.length === 3);
    expect(messages[0]).toEqual({ data: Buffer.from('hello /ws/environment/e1?role=harness&sig=abc'), binary: false });
    expect(messages[1]).toEqual({ data: Buffer.from('plain-text-marker-7f3a'), binary: false });
    expect(messages[2]).toEqual({ data: Buffer.from([0, 1, 2, 255]), binary: true });
    expect(tap.upgrades()).toEqual(['/ws/environment/e1?role=harness&sig=abc']);
    // The negative control for blindness checks: plain text that crossed the tap is found.
    expect(tap.containsBytes('plain-text-marker-7f3a')).toBe(true);
    expect(tap.containsBytes(new Uint8Array([1, 2, 255]))).toBe(true);
    expect(tap.containsBytes('never-sent-ee91')).toBe(false);
    const frames = tap.frames().filter((f) => f.connection === 1);
    expect(frames.map((f) => [f.direction, f.binary])).toEqual([
      ['down', false],
      ['up', false],
      ['up', true],
      ['down', false],
      ['down', true],
    ]);
    expect(tap.bytesSeen()).toBe(frames.reduce((sum, f) => sum + f.data.byteLength, 0));
    socket.close(4001, 'bye');
    await until(() => relayCloses.some((c) => c.code === 4001 && c.reason === 'bye'));
  });

  it('finds a needle split across two messages of one connection', async () => {
    const { socket, messages } = await open('/split');
    socket.send('first-half-');
    socket.send('second-half');
    await until(() => messages.length === 3);
    expect(tap.containsBytes('half-second')).toBe(true);
    socket.close();
  });

  it('answers a relay refusal with its status', async () => {
    const socket = new WebSocket(`${tap.url}/refuse?sig=bad`);
    socket.on('error', () => undefined);
    const [, response] = await once(socket, 'unexpected-response');
    expect(response.statusCode).toBe(401);
    socket.terminate();
  });

  it('mirrors a close from the relay', async () => {
    const { socket } = await open('/closing');
    const relaySide = [...relaySockets].at(-1) as WebSocket;
    relaySide.close(4002, 'relay says bye');
    const [code, reason] = await once(socket, 'close');
    expect([code, reason.toString()]).toEqual([4002, 'relay says bye']);
  });

  it('dropAll cuts both sides without a close frame, and refuses upgrades for refuseForMs', async () => {
    const { socket } = await open('/drop');
    await until(() => relaySockets.size === 1);
    const closes = relayCloses.length;
    tap.dropAll({ refuseForMs: 500 });
    const [code] = await once(socket, 'close');
    expect(code).toBe(1006);
    await until(() => relayCloses.length === closes + 1);
    expect(relayCloses.at(-1)?.code).toBe(1006);
    const refused = new WebSocket(`${tap.url}/drop`);
    refused.on('error', () => undefined);
    const refusedCode = await new Promise((resolve) => refused.once('close', resolve));
    expect(refusedCode).toBe(1006);
    await new Promise((resolve) => setTimeout(resolve, 550));
    const again = await open('/drop');
    again.socket.close();
  });
});
