// Preloaded (`node --import`) into the registry and the relay that scripts/stack.mjs starts, so that they never
// outlive it. Their stdin is a pipe whose other end only the stack holds: it closes when the stack ends,
// however it ends (SIGKILL included), and the service then stops as on SIGTERM, its graceful path. (The
// executor does the same itself: --exit-on-stdin-close.)
let ended = false;
const stop = () => {
  if (ended) return;
  ended = true;
  // The service's own SIGTERM listener (main.ts); none yet when it is still starting, none any more when a
  // SIGTERM came already (it is stopping): then it exits on its own or within 10 s.
  process.emit('SIGTERM', 'SIGTERM');
  setTimeout(() => process.exit(1), 10_000).unref();
};
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();
// Reading stdin must not keep the service alive.
if (typeof process.stdin.unref === 'function') process.stdin.unref();
