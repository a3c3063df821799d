/**
 * The byte bounds of the data path, each defined here once and imported where it is used: a transport, a
 * relay link and a tap that disagreed on a water mark would pause and resume each other out of step, so
 * there is one number for each. Browser-safe (no Node API): `@tether/bytes/bounds`.
 */

const KiB = 1024;
const MiB = 1024 * KiB;

/**
 * Outbound buffer of a socket or transport (a JSON-RPC transport, a relay link, the executor's multiplexed
 * relay socket, the browser's socket link, a test relay tap): `send` says false above the high-water mark,
 * `onDrain` fires once it is back at or below the low one.
 */
export const DEFAULT_HIGH_WATER_MARK = 4 * MiB;
export const DEFAULT_LOW_WATER_MARK = 1 * MiB;

/**
 * The SDK's per-process output queue: a process stops reading (or asks for no more credit) above this many
 * queued bytes, and reads again once its consumer took it below a quarter of it (`LOW_WATER_FRACTION`).
 */
export const DEFAULT_HIGH_WATER_BYTES = 512 * KiB;
export const LOW_WATER_FRACTION = 0.25;

/** Output one `process/read` asks for (a pull after a gap, a detached process's read). */
export const PROCESS_READ_MAX_BYTES = 1 * MiB;

/**
 * The largest `fs/readBlock` / `fs/writeBlock` block (the executor refuses larger ones) and the SDK's
 * default block size: a block is one message, one pooled slab on either side.
 */
export const MAX_BLOCK_BYTES = 1 * MiB;
