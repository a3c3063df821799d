import type { KeyObject } from 'node:crypto';
import { type IncomingMessage, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { grantIdentity, type RelayGrant, verifyRelayRequest } from '@tether/relay-auth';
import type { Logger } from 'pino';
import { type WebSocket, WebSocketServer } from 'ws';
import type { TrustedProxies } from './client-address.js';
import type { Clock } from './clock.js';
import { CLOSE, type RelayLimits } from './limits.js';
import { Counts } from './memory.js';
import type { RefusalReason, RelayMetrics } from './metrics.js';
import type { PairingTable, UnclaimedHold } from './pairing.js';

export interface AdmissionOptions {
  publicKey: KeyObject;
  limits: RelayLimits;
  clock: Clock;
  log: Logger;
  metrics: RelayMetrics;
  trustProxy: TrustedProxies;
  table: PairingTable;
  /** The relay is shutting down: every upgrade is refused. */
  closing(): boolean;
}

/** The open sockets of one harness grant (one signed URL), counted from the upgrade to the socket's close. */
interface GrantSockets {
  readonly id: string;
  open: number;
  unclaimed: number;
}

/** One harness socket's place in its grant's counts: unclaimed until its stream is claimed or it starts closing. */
class GrantHold implements UnclaimedHold {
  #unclaimed = true;

  constructor(readonly grant: GrantSockets) {}

  settle(): void {
    if (!this.#unclaimed) return;
    this.#unclaimed = false;
    this.grant.unclaimed -= 1;
  }
}

/**
 * The upgrade: every check that refuses a socket before a WebSocket exists (shutdown, the relay's, an IP's and a
 * harness URL's socket counts, the signature, a revoked or superseded registration), with the counts it keeps
 * until each admitted socket closes; an admitted socket goes to the pairing table.
 */
export class Admission {
  readonly #wss: WebSocketServer;
  readonly #connectionsByIp = new Counts();
  /** Open sockets of each harness grant with at least one (`maxSocketsPerUrl`, `maxUnclaimedPerUrl`). */
  readonly #socketsByGrant = new Map<string, GrantSockets>();
  /** Every upgraded socket until it closes, both roles (`maxConnections`). */
  #openSockets = 0;

  constructor(private readonly options: AdmissionOptions) {
    this.#wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.limits.maxMessageBytes,
      perMessageDeflate: false,
      clientTracking: false,
      // Text messages are refused whole; their bytes are never read as UTF-8.
      skipUTF8Validation: true,
    });
  }

  readonly onUpgrade = (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const { limits, table } = this.options;
    if (this.options.closing()) return this.#refuse(socket, 503, 'shutting_down');
    if (this.#openSockets >= limits.maxConnections) return this.#refuse(socket, 503, 'connection_limit');
    // The per-IP limit counts the client behind a trusted proxy, not the proxy.
    const ip = this.options.trustProxy.clientAddress(socket.remoteAddress, req.headers['x-forwarded-for']);
    if (this.#connectionsByIp.get(ip) >= limits.maxConnectionsPerIp) return this.#refuse(socket, 429, 'ip_limit');
    const verdict = verifyRelayRequest(req.url ?? '/', this.options.publicKey, Math.floor(this.options.clock() / 1000));
    if (!verdict.ok) return this.#refuse(socket, verdict.status, verdict.reason);
    // ws completes this upgrade synchronously (no verifyClient), so nothing can change between here and attach.
    const grant = verdict.grant;
    if (table.isRevoked(grant.environmentId, grant.registrationId)) {
      return this.#refuse(socket, 401, 'registration_revoked');
    }
    if (grant.role === 'environment' && grant.epoch < table.newestEpoch(grant.environmentId)) {
      // An older executor must not displace the current one (it would, as a newer socket).
      return this.#refuse(socket, 409, 'stale_registration');
    }
    // A harness grant (one signed URL, told apart by its signed fields, nonce included) holds a few sockets at most,
    // so one URL replayed cannot fill this IP's allowance or the relay.
    let hold: GrantHold | null = null;
    if (grant.role === 'harness') {
      const id = grantIdentity(grant);
      const held = this.#socketsByGrant.get(id);
      if (held && held.open >= limits.maxSocketsPerUrl) return this.#refuse(socket, 429, 'url_limit');
      if (held && held.unclaimed >= limits.maxUnclaimedPerUrl) return this.#refuse(socket, 429, 'url_unclaimed_limit');
      const sockets = held ?? { id, open: 0, unclaimed: 0 };
      if (!held) this.#socketsByGrant.set(id, sockets);
      sockets.open += 1;
      sockets.unclaimed += 1;
      hold = new GrantHold(sockets);
    }
    this.#openSockets += 1;
    this.#connectionsByIp.add(ip);
    socket.once('close', () => {
      this.#openSockets -= 1;
      this.#connectionsByIp.remove(ip);
      if (hold) {
        hold.settle();
        hold.grant.open -= 1;
        if (hold.grant.open <= 0) this.#socketsByGrant.delete(hold.grant.id);
      }
    });
    this.#wss.handleUpgrade(req, socket, head, (ws) => this.#attach(ws, socket, grant, hold));
  };

  /** No more upgrades complete (the relay is closing). */
  close(): void {
    this.#wss.close();
  }

  #attach(ws: WebSocket, socket: Socket, grant: RelayGrant, hold: GrantHold | null) {
    if (this.options.closing()) {
      ws.close(CLOSE.GOING_AWAY, 'relay shutting down');
      return;
    }
    this.options.metrics.counter('relay_connections_total', { role: grant.role }).inc();
    if (grant.role === 'environment') this.options.table.attachEnvironment(ws, socket, grant);
    else this.options.table.attachHarness(ws, socket, grant, hold as GrantHold);
  }

  #refuse(socket: Socket, status: number, reason: RefusalReason) {
    this.options.metrics.counter('relay_upgrades_refused_total', { reason }).inc();
    // Counted always; logged at debug only, so a flood of bad upgrades cannot flood the logs.
    this.options.log.debug({ status, reason }, 'upgrade refused');
    socket.on('error', () => {});
    const body = `${reason}\n`;
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: text/plain\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      () => socket.destroy(),
    );
  }
}
