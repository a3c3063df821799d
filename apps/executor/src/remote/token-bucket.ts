/** Milliseconds on a monotonic clock; injectable so tests drive time themselves. */
export type Clock = () => number;

export const monotonicClock: Clock = () => performance.now();

export interface TokenBucketOptions {
  /** Tokens when full: how many events may come at once after a quiet spell. */
  burst: number;
  /** Milliseconds for one token to come back. */
  refillMs: number;
}

/**
 * A token bucket: `burst` events at once, then one per `refillMs`. A budget that decays, where a plain
 * counter would condemn a long-lived socket for failures spread over days.
 */
export class TokenBucket {
  private tokens: number;
  private updatedAt: number;

  constructor(
    private readonly options: TokenBucketOptions,
    private readonly now: Clock = monotonicClock,
  ) {
    if (!(options.burst >= 1) || !(options.refillMs > 0)) throw new RangeError('burst ≥ 1 and refillMs > 0 needed');
    this.tokens = options.burst;
    this.updatedAt = now();
  }

  /** Tokens available now (fractional while one refills). */
  get available(): number {
    this.refill();
    return this.tokens;
  }

  /** True when it is back to `burst` (nothing to remember about its owner). */
  get full(): boolean {
    return this.available >= this.options.burst;
  }

  /** Takes one token if there is one. */
  take(): boolean {
    this.refill();
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  private refill(): void {
    const now = this.now();
    const elapsed = now - this.updatedAt;
    this.updatedAt = now;
    if (elapsed > 0) this.tokens = Math.min(this.options.burst, this.tokens + elapsed / this.options.refillMs);
  }
}

/**
 * One TokenBucket per key (a harness public key), in a map of at most `maxKeys` entries. A full bucket
 * carries no information, so when the map is full those are dropped first, then the least recently used:
 * memory stays bounded however many keys a peer makes up (which also means a peer minting a fresh key
 * per attempt is bounded by the caller's global limits, not by this map).
 */
export class KeyedTokenBuckets {
  private readonly buckets = new Map<string, TokenBucket>();

  constructor(
    private readonly options: TokenBucketOptions & { maxKeys: number },
    private readonly now: Clock = monotonicClock,
  ) {}

  get size(): number {
    return this.buckets.size;
  }

  /** Takes one token from `key`'s bucket. */
  take(key: string): boolean {
    let bucket = this.buckets.get(key);
    if (bucket) {
      this.buckets.delete(key); // re-inserted below: the map's order is least recently used first
    } else {
      this.makeRoom();
      bucket = new TokenBucket(this.options, this.now);
    }
    this.buckets.set(key, bucket);
    return bucket.take();
  }

  private makeRoom(): void {
    if (this.buckets.size < this.options.maxKeys) return;
    for (const [key, bucket] of this.buckets) if (bucket.full) this.buckets.delete(key);
    if (this.buckets.size < this.options.maxKeys) return;
    const oldest = this.buckets.keys().next();
    if (!oldest.done) this.buckets.delete(oldest.value);
  }
}
