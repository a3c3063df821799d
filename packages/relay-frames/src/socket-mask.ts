/**
 * The masking key for WebSocket clients that carry relay frames (the executor's relay link, the SDK's
 * rendezvous socket), given to `ws` as `generateMask`: all zeros, so `ws` sends each frame as it is instead
 * of copying it into a fresh buffer and XORing it (≈ 5 % of a transfer's CPU on each end, and the
 * garbage of one copy per 60 KiB record).
 *
 * Masking (RFC 6455 §10.3) keeps a hostile script in a browser from choosing the bytes a proxy sees on the
 * wire. Neither end here is a browser running someone else's script, and what these sockets carry is
 * AEAD ciphertext under keys only the two ends hold: nobody can choose those bytes, which is what the mask
 * is for. Servers accept any key (the relay, and Codex's, only check that frames are masked), and the
 * relay's fast path skips unmasking a zero key.
 */
export function relaySocketMask(mask: Buffer): void {
  mask.fill(0);
}
