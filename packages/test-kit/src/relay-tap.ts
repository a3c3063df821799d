import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { DEFAULT_HIGH_WATER_MARK } from '@tether/bytes';
import { WebSocket, WebSocketServer } from 'ws';

/** One WebSocket message as it crossed the tap: `up` from a client (harness, executor) to the relay, `down` back. */
export interface TapFrame {
  /** Which client connection (1, 2, … in order of upgrade). */
  connection: number;
  direction: 'up' | 'down';
  binary: boolean;
  /** The message payload, unmasked, exactly as forwarded. */
  data: Buffer;
  /** Date.now() when it arrived at the tap. */
  at: number;
}

export interface RelayTap extends AsyncDisposable {
  /** `ws://127.0.0.1:PORT`: give it to the registry as the relay's URL. */
  readonly url: string;
  /** The relay to forward to (`ws://host:port`); upgrades before this is set are refused with 503. */
  setTarget(url: string): void;
  /** Every message forwarded so far, both directions, in arrival order. */
  frames(): readonly TapFrame[];
  /** Total payload bytes forwarded, both directions. */
  bytesSeen(): number;
  /**
   * Whether `needle` (a string is taken as UTF-8) occurs in what one connection sent one way: in a recorded
   * payload or across consecutive ones.
   */
  containsBytes(needle: Uint8Array | string): boolean;
  /** Client connections accepted so far (each one paired with its own relay connection). */
  connections(): number;
  /** The (path + query) of each upgrade, in order: the signed URLs the clients used. */
  upgrades(): readonly string[];
  /**
   * Cuts every open pair at once, both sides at the TCP level (no close frame: what a dropped network looks
   * like); with `refuseForMs`, new upgrades are cut too for that long (the network stays down).
   */
  dropAll(options?: { refuseForMs?: number }): void;
  close(): Promise<void>;
}

/** Close codes ws may send: 1005 (none) and 1006 (abnormal) only describe a close; 1004 and 1015 are reserved. */
function sendableCode(code: number): boolean {
  return (code >= 1000 && code <= 1014 && ![1004, 1005, 1006].includes(code)) || (code >= 3000 && code <= 4999);
}

/** Mirrors a close received on one side onto the other. */
function mirrorClose(to: WebSocket, code: number, reason: Buffer): void {
  if (to.readyState === WebSocket.CLOSED) return;
  if (to.readyState === WebSocket.CONNECTING || code === 1006) {
    to.terminate();
    return;
  }
  if (sendableCode(code)) to.close(code, reason);
  else to.close();
}

/**
 * A recording WebSocket proxy in front of a relay, for tests that check what the relay sees. It accepts any
 * upgrade on 127.0.0.1:0, opens one to the target relay with the same path and query (the signed URL binds no
 * host, so it verifies there unchanged), and only then completes the client's upgrade (a refusal by the relay
 * is answered to the client with the same status). Messages are forwarded unchanged both ways (binary stays
 * binary, with backpressure) and recorded in memory; closes are mirrored.
 */
export async function startRelayTap(): Promise<RelayTap> {
  let target: string | undefined;
  const recorded: TapFrame[] = [];
  const upgradePaths: string[] = [];
  let seen = 0;
  let accepted = 0;
  let refuseUntil = 0;
  const pairs = new Set<{ client?: WebSocket; relay: WebSocket; socket: Socket }>();
  const server = createServer((_req, res) => {
    res.writeHead(426).end();
  });
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 0 });

  const pipe = (from: WebSocket, to: WebSocket, connection: number, direction: 'up' | 'down') => {
    from.on('message', (data: Buffer, binary: boolean) => {
      recorded.push({ connection, direction, binary, data, at: Date.now() });
      seen += data.byteLength;
      if (to.readyState !== WebSocket.OPEN) return;
      to.send(data, { binary }, () => {
        if (from.isPaused && to.bufferedAmount < DEFAULT_HIGH_WATER_MARK) from.resume();
      });
      if (to.bufferedAmount >= DEFAULT_HIGH_WATER_MARK) from.pause();
    });
    from.on('close', (code: number, reason: Buffer) => mirrorClose(to, code, reason));
  };

  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined);
    const path = req.url ?? '/';
    if (Date.now() < refuseUntil) {
      socket.destroy();
      return;
    }
    if (target === undefined) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    upgradePaths.push(path);
    const connection = ++accepted;
    const relay = new WebSocket(new URL(path, target), { perMessageDeflate: false, maxPayload: 0 });
    const pair: { client?: WebSocket; relay: WebSocket; socket: Socket } = { relay, socket };
    pairs.add(pair);
    // Relay → client messages that arrive before the client's upgrade completes wait here.
    const early: { data: Buffer; binary: boolean }[] = [];
    relay.on('message', (data: Buffer, binary: boolean) => {
      if (!pair.client) early.push({ data, binary });
    });
    relay.on('error', () => undefined);
    relay.once('unexpected-response', (_request, response) => {
      const status = response.statusCode ?? 502;
      socket.end(
        `HTTP/1.1 ${status} ${response.statusMessage ?? ''}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`,
      );
      response.resume();
      relay.terminate();
      pairs.delete(pair);
    });
    relay.once('close', () => {
      if (!pair.client) {
        socket.destroy();
        pairs.delete(pair);
      }
    });
    socket.once('close', () => {
      if (!pair.client) relay.terminate();
    });
    relay.once('open', () => {
      if (socket.destroyed) {
        relay.terminate();
        return;
      }
      wss.handleUpgrade(req, socket, head, (client) => {
        pair.client = client;
        client.on('error', () => undefined);
        client.once('close', () => pairs.delete(pair));
        pipe(client, relay, connection, 'up');
        pipe(relay, client, connection, 'down');
        for (const { data, binary } of early.splice(0)) {
          recorded.push({ connection, direction: 'down', binary, data, at: Date.now() });
          seen += data.byteLength;
          client.send(data, { binary });
        }
      });
    });
  });

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const dropAll = (options: { refuseForMs?: number } = {}) => {
    if (options.refuseForMs) refuseUntil = Date.now() + options.refuseForMs;
    for (const pair of pairs) {
      pair.client?.terminate();
      pair.socket.destroy();
      pair.relay.terminate();
    }
    pairs.clear();
  };
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      dropAll();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    })();
    return closing;
  };

  return {
    url,
    setTarget(value) {
      target = value;
    },
    frames: () => recorded,
    bytesSeen: () => seen,
    containsBytes(needle) {
      const bytes = typeof needle === 'string' ? Buffer.from(needle, 'utf8') : Buffer.from(needle);
      if (bytes.byteLength === 0) throw new RangeError('containsBytes needs a non-empty needle');
      // Per connection and direction, the payloads joined: a needle split across messages counts too.
      const streams = new Map<string, Buffer[]>();
      for (const frame of recorded) {
        const key = `${frame.connection}/${frame.direction}`;
        const list = streams.get(key) ?? [];
        list.push(frame.data);
        streams.set(key, list);
      }
      return [...streams.values()].some((list) => Buffer.concat(list).includes(bytes));
    },
    connections: () => accepted,
    upgrades: () => upgradePaths,
    dropAll,
    close,
    [Symbol.asyncDispose]: close,
  };
}
