import { Notification } from './methods.js';

const TAIL = '"}}';

/** Where an encoder puts its result: a buffer of exactly `size` bytes (default: a fresh one). */
export type Allocate = (size: number) => Buffer;

/**
 * `head` + base64(bytes) + `tail` as one Buffer. The base64 text never needs JSON escaping, so it is copied
 * once (latin1) instead of being scanned by JSON.stringify and re-encoded as UTF-8 by the transport.
 */
function withBase64(head: string, bytes: Buffer, tail: string, allocate: Allocate = Buffer.allocUnsafe): Buffer {
  const headBytes = Buffer.byteLength(head);
  const base64Bytes = Math.ceil(bytes.length / 3) * 4;
  const out = allocate(headBytes + base64Bytes + Buffer.byteLength(tail));
  out.write(head, 0, 'utf8');
  out.write(bytes.toString('base64'), headBytes, 'latin1');
  out.write(tail, headBytes + base64Bytes, 'utf8');
  return out;
}

/**
 * Serializes `process/output` straight into bytes: the hot path of streaming. The result equals
 * `JSON.stringify({method, params: {processId, seq, stream, chunk: base64}})`, but the base64 text (which
 * never needs escaping) is copied once instead of being scanned by JSON.stringify and then re-encoded by
 * the transport (about half of the executor's CPU per streamed byte). `allocate` lets a caller supply
 * reusable buffers.
 */
export function encodeOutputNotification(
  processId: string,
  seq: number,
  stream: string,
  chunk: Buffer,
  allocate?: Allocate,
): Buffer {
  const head = `{"method":"${Notification.processOutput}","params":{"processId":${JSON.stringify(processId)},"seq":${seq},"stream":${JSON.stringify(stream)},"chunk":"`;
  return withBase64(head, chunk, TAIL, allocate);
}

/**
 * Serializes a response whose result is `{<field>: base64(bytes), …rest}` straight into bytes, for the
 * large answers of `fs/readBlock` and `fs/readFile`. Equals `JSON.stringify({id, result})` with `field`
 * first; `rest` holds only booleans and numbers. JSON.stringify of a megabyte of base64 (scanning it for
 * escapes, then re-encoding it for the transport) was the executor's main cost per block read.
 */
export function encodeBase64Response(
  id: string | number,
  field: string,
  bytes: Buffer,
  rest: Record<string, boolean | number> = {},
  allocate?: Allocate,
): Buffer {
  const head = `{"id":${JSON.stringify(id)},"result":{${JSON.stringify(field)}:"`;
  let tail = '"';
  for (const [key, value] of Object.entries(rest)) tail += `,${JSON.stringify(key)}:${JSON.stringify(value)}`;
  tail += '}}';
  return withBase64(head, bytes, tail, allocate);
}

/**
 * Serializes an `fs/writeBlock` request straight into bytes (the client's hot path when uploading):
 * equals `JSON.stringify({id, method: "fs/writeBlock", params: {handleId, offset, chunk: base64(bytes)}})`.
 */
export function encodeWriteBlockRequest(
  id: string | number,
  handleId: string,
  offset: number,
  bytes: Buffer,
  allocate?: Allocate,
): Buffer {
  const head = `{"id":${JSON.stringify(id)},"method":"fs/writeBlock","params":{"handleId":${JSON.stringify(handleId)},"offset":${offset},"chunk":"`;
  return withBase64(head, bytes, TAIL, allocate);
}
