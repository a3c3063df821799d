import type { Readable, Writable } from 'node:stream';
import { DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK } from '@tether/bytes';
import { hasAttachmentMarker } from '../attachment.js';
import { DEFAULT_MAX_MESSAGE_BYTES, type MessageTransport, type TransportHandlers } from '../transport.js';

export interface StdioTransportOptions {
  input: Readable;
  output: Writable;
  label?: string;
  maxMessageBytes?: number;
  /** Called instead of onMessage for a line longer than maxMessageBytes (the line is discarded). */
  onOversize?: (bytes: number) => void;
}

const NEWLINE = 0x0a;
const NEWLINE_BYTES = Buffer.from('\n');

/**
 * Newline-delimited JSON over a Readable/Writable pair (spec §1.3): one compact JSON message per line,
 * blank lines skipped, EOF on input = disconnect. Honours `write()` backpressure through `drain`.
 */
export class StdioTransport implements MessageTransport {
  readonly kind = 'stdio' as const;
  readonly carriesAttachments = false;
  readonly label: string;
  private readonly input: Readable;
  private readonly output: Writable;
  private readonly maxMessageBytes: number;
  private readonly onOversize: ((bytes: number) => void) | undefined;
  private handlers: TransportHandlers | null = null;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** True while discarding the rest of an oversize line. */
  private discarding = false;
  private needsDrain = false;
  private closed = false;

  constructor(options: StdioTransportOptions) {
    this.input = options.input;
    this.output = options.output;
    this.label = options.label ?? 'exec-server stdio';
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.onOversize = options.onOversize;
  }

  get bufferedAmount(): number {
    return this.output.writableLength;
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    this.input.on('data', this.onData);
    this.input.once('end', () => this.finish('stdin closed'));
    this.input.once('error', (err: Error) => this.finish(`stdin error: ${err.message}`));
    this.output.on('drain', this.onOutputDrain);
    this.output.once('error', (err: Error) => this.finish(`stdout error: ${err.message}`));
    this.output.once('close', () => this.finish('stdout closed'));
  }

  send(message: string | Buffer): boolean {
    if (hasAttachmentMarker(message)) throw new Error('a message with a binary attachment cannot be sent over stdio');
    if (this.closed) return false;
    let ok: boolean;
    if (typeof message === 'string') {
      ok = this.output.write(`${message}\n`);
    } else {
      this.output.cork();
      this.output.write(message);
      ok = this.output.write(NEWLINE_BYTES);
      this.output.uncork();
    }
    if (!ok || this.output.writableLength > DEFAULT_HIGH_WATER_MARK) this.needsDrain = true;
    return !this.needsDrain;
  }

  pause(): void {
    this.input.pause();
  }

  resume(): void {
    if (!this.closed) this.input.resume();
  }

  close(): void {
    this.finish('closed');
  }

  private readonly onOutputDrain = (): void => {
    if (this.needsDrain && this.output.writableLength <= DEFAULT_LOW_WATER_MARK) {
      this.needsDrain = false;
      this.handlers?.onDrain();
    }
  };

  private readonly onData = (data: Buffer): void => {
    let start = 0;
    while (start < data.length && !this.closed) {
      const end = data.indexOf(NEWLINE, start);
      if (end === -1) {
        this.append(data.subarray(start));
        return;
      }
      this.append(data.subarray(start, end));
      this.flushLine();
      start = end + 1;
    }
  };

  private append(part: Buffer): void {
    if (part.length === 0) return;
    if (this.discarding) {
      this.pendingBytes += part.length;
      return;
    }
    this.pendingBytes += part.length;
    if (this.pendingBytes > this.maxMessageBytes) {
      // Too long to be a message we accept: drop what we hold and the rest of the line.
      this.pending = [];
      this.discarding = true;
      return;
    }
    this.pending.push(part);
  }

  private flushLine(): void {
    if (this.discarding) {
      const bytes = this.pendingBytes;
      this.discarding = false;
      this.pendingBytes = 0;
      this.onOversize?.(bytes);
      return;
    }
    const line = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    if (!line || isBlank(line)) return;
    this.handlers?.onMessage(line);
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.input.off('data', this.onData);
    this.output.off('drain', this.onOutputDrain);
    this.pending = [];
    this.handlers?.onClose(reason);
  }
}

function isBlank(line: Buffer): boolean {
  for (const byte of line) {
    if (byte !== 0x20 && byte !== 0x09 && byte !== 0x0d) return false;
  }
  return true;
}
