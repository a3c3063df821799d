/**
 * Checks a recording (writer.ts, chain.ts): the chain from the header through every event, each seal's list of
 * links, its count, its head and its signature. The first problem ends the check and is named by its line in
 * the file and, where an event's bytes changed, by that event.
 */
import type { KeyObject } from 'node:crypto';
import {
  firstLink,
  LINK_PREFIX_BYTES,
  nextLink,
  publicKeyOf,
  publicKeyText,
  SEAL_TYPE,
  type Seal,
  sealSigned,
} from './chain.js';

export interface VerifyOptions {
  /** The executor's recording key, from where it was published; without it the file's own is used (and said). */
  key?: KeyObject;
}

export interface VerifyProblem {
  /** 1-based line of the file (the header is line 1). */
  line: number;
  /** 1-based event (lines after the header, seals not counted), where the problem is an event's. */
  event?: number;
  reason: string;
}

export interface VerifyReport {
  ok: boolean;
  events: number;
  seals: number;
  /** The key the seals were checked with (`ed25519:…`). */
  key: string | null;
  /** Whether that key came from the caller (else only from the file itself, which proves less). */
  trusted: boolean;
  problem?: VerifyProblem;
}

export function verifyRecording(text: string, options: VerifyOptions = {}): VerifyReport {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const report: VerifyReport = { ok: false, events: 0, seals: 0, key: null, trusted: options.key !== undefined };
  const fail = (line: number, reason: string, event?: number): VerifyReport => ({
    ...report,
    problem: { line, reason, ...(event === undefined ? {} : { event }) },
  });
  const headerLine = lines[0];
  if (headerLine === undefined) return fail(1, 'the file is empty');
  let header: { version?: unknown; tether?: { key?: unknown } };
  try {
    header = JSON.parse(headerLine);
  } catch {
    return fail(1, 'the header is not JSON');
  }
  if (typeof header !== 'object' || header === null || header.version !== 2) {
    return fail(1, 'the header is not an asciicast v2 header');
  }
  let fileKey: KeyObject | null = null;
  try {
    fileKey = publicKeyOf(String(header.tether?.key ?? ''));
  } catch {
    if (!options.key) return fail(1, 'the header names no recording key (pass --key)');
  }
  const key = options.key ?? fileKey!;
  report.key = publicKeyText(key);
  if (options.key && fileKey && publicKeyText(fileKey) !== report.key) {
    return fail(1, `the header names key ${publicKeyText(fileKey)}, not the trusted ${report.key}`);
  }
  let link = firstLink(headerLine);
  /** Links of the events since the last seal, and the line each event is on. */
  let unsealed: Array<{ link: Buffer; line: number }> = [];
  for (let index = 1; index < lines.length; index++) {
    const lineNumber = index + 1;
    const line = lines[index]!;
    let event: unknown;
    try {
      event = JSON.parse(line);
    } catch {
      event = null;
    }
    const isSeal = Array.isArray(event) && event[1] === SEAL_TYPE;
    if (!isSeal) {
      // A line that is no event is still a link: a changed byte shows where the seal's links stop matching.
      link = nextLink(link, line);
      report.events++;
      unsealed.push({ link, line: lineNumber });
      continue;
    }
    const seal = sealOf((event as unknown[])[2]);
    if (seal === null) return fail(lineNumber, 'a seal that does not parse');
    const listed = Buffer.from(seal.links, 'base64');
    // The first event whose link is not the one sealed: its bytes (or an earlier line's order) changed.
    for (let k = 0; k < unsealed.length; k++) {
      const sealed = listed.subarray(k * LINK_PREFIX_BYTES, (k + 1) * LINK_PREFIX_BYTES);
      if (!sealed.equals(unsealed[k]!.link.subarray(0, LINK_PREFIX_BYTES))) {
        const first = report.events - unsealed.length + k + 1;
        return fail(
          unsealed[k]!.line,
          'not what was recorded (changed, or an event before it was removed or moved)',
          first,
        );
      }
    }
    if (listed.length !== unsealed.length * LINK_PREFIX_BYTES || seal.n !== report.events) {
      return fail(
        lineNumber,
        `the seal covers ${seal.n} events, the file has ${report.events} before it (events were added or removed)`,
      );
    }
    if (seal.head !== link.toString('base64')) return fail(lineNumber, 'the seal names another chain head');
    if (!sealSigned(seal, key)) return fail(lineNumber, 'the seal is not signed by the recording key');
    report.seals++;
    unsealed = [];
  }
  if (unsealed.length > 0) {
    const first = report.events - unsealed.length + 1;
    return fail(
      unsealed[0]!.line,
      `events ${first}–${report.events} follow the last seal (the recording did not end cleanly, or lines were added)`,
      first,
    );
  }
  if (report.seals === 0) return fail(1, 'no seal: nothing in the file is signed');
  return { ...report, ok: true };
}

function sealOf(data: unknown): Seal | null {
  if (typeof data !== 'string') return null;
  try {
    const seal = JSON.parse(data) as Seal;
    const fine =
      Number.isSafeInteger(seal.n) &&
      typeof seal.head === 'string' &&
      typeof seal.links === 'string' &&
      typeof seal.sig === 'string';
    return fine ? seal : null;
  } catch {
    return null;
  }
}
