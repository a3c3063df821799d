/**
 * @tether/bytes: the data path's buffers and bounds in one place. Pools and slab leases (`BufferPool`,
 * `ReadBufferPool`), the release of a sent buffer (`releasingCallback`), write batching (`WriteBatch`),
 * bounded-concurrency work over a batch of files (`mapBounded`), and every byte bound the transports, links
 * and the SDK share (`bounds.ts`). A pool or batch is made by the owner of a connection (or relay) and handed
 * to what it builds; nothing here is module-level state.
 */
export * from './batch.js';
export * from './bounds.js';
export { mapBounded } from './map-bounded.js';
export { type BufferLease, BufferPool, type BufferPoolOptions, HandedChunks, releasingCallback } from './pool.js';
export { KEEP_READ_AT_BYTES, READ_BUFFER_BYTES, ReadBufferPool } from './read-pool.js';
