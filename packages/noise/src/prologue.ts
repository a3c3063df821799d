/**
 * rendezvous.md §4.4: prologue = P(D) ‖ P(environment_id) ‖ P(executor_registration_id) ‖ P(stream_id),
 * P(x) = u64_be(len(x)) ‖ x. Frozen wire contract: the domain string and the 8-byte prefix width match
 * shipped Codex (an unmerged variant used u32 prefixes).
 */
export const PROLOGUE_DOMAIN = 'codex-exec-server-relay-noise/v1';

export interface RelayPrologueIds {
  readonly environmentId: string;
  readonly registrationId: string;
  readonly streamId: string;
}

/** Length-prefixes each part (u64 big-endian byte length) and concatenates them. */
export function encodePrologue(parts: readonly (string | Uint8Array)[]): Uint8Array {
  const encoder = new TextEncoder();
  const bytes = parts.map((part) => (typeof part === 'string' ? encoder.encode(part) : part));
  const out = new Uint8Array(bytes.reduce((sum, part) => sum + 8 + part.length, 0));
  const view = new DataView(out.buffer);
  let offset = 0;
  for (const part of bytes) {
    view.setBigUint64(offset, BigInt(part.length), false);
    out.set(part, offset + 8);
    offset += 8 + part.length;
  }
  return out;
}

/** The prologue that binds a handshake to one environment, registration and relay stream. */
export function buildRelayPrologue(ids: RelayPrologueIds): Uint8Array {
  return encodePrologue([PROLOGUE_DOMAIN, ids.environmentId, ids.registrationId, ids.streamId]);
}
