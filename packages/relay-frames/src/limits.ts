// Wire contract with codex exec-server (rendezvous spec §3.3, §3.5, §3.7). Both endpoints and the relay
// enforce these exact values; changing one breaks interoperability with unmodified codex binaries.

/** `RelayMessageFrame.version`: the only version codex sends or accepts. */
export const RELAY_PROTOCOL_VERSION = 1;
/** Largest encoded frame: one WebSocket message, whose max size is 256 KiB on both endpoints. */
export const MAX_FRAME_BYTES = 256 * 1024;
/** Largest `stream_id`, in UTF-8 bytes (older codex rejects longer ids). */
export const MAX_STREAM_ID_BYTES = 128;
/** Largest `Reset.reason`, in UTF-8 bytes (older codex rejects longer reasons). */
export const MAX_RESET_REASON_BYTES = 256;
/** Largest plaintext per Noise transport record (60 KiB); ciphertext adds a 16-byte tag. */
export const MAX_RECORD_PLAINTEXT_BYTES = 61_440;
/** Width of the big-endian length prefix in front of every JSON-RPC message. */
export const MESSAGE_LENGTH_PREFIX_BYTES = 4;
/** Largest JSON-RPC message (the length prefix's value), 64 MiB. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** Receive window: a record may be at most this far ahead of the next expected `seq`. */
export const MAX_REORDER_DISTANCE = 64;
/** Receive window: at most this many records buffered out of order. */
export const MAX_REORDER_RECORDS = 64;
/** Receive window: at most this many bytes buffered out of order (1 MiB). */
export const MAX_REORDER_BYTES = 1024 * 1024;
/** `seq` is a u32 that never wraps: the last usable sequence number. */
export const MAX_SEQ = 0xffff_ffff;

/** Every wire limit in one frozen object (same values as the named constants above). */
export const RELAY_LIMITS = Object.freeze({
  RELAY_PROTOCOL_VERSION,
  MAX_FRAME_BYTES,
  MAX_STREAM_ID_BYTES,
  MAX_RESET_REASON_BYTES,
  MAX_RECORD_PLAINTEXT_BYTES,
  MESSAGE_LENGTH_PREFIX_BYTES,
  MAX_MESSAGE_BYTES,
  MAX_REORDER_DISTANCE,
  MAX_REORDER_RECORDS,
  MAX_REORDER_BYTES,
  MAX_SEQ,
} as const);
