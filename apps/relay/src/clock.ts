/**
 * The relay's one source of time, epoch ms: URL signature expiry, the bounded memories (revocations, epochs),
 * socket liveness and stream deadlines all read it, so a test that moves it moves all of them.
 */
export type Clock = () => number;

/** The default clock: the only place relay code reads the system time. */
export const systemClock: Clock = Date.now;
