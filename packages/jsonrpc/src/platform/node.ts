/** Node's native helpers where the package has a portable fallback (`#platform`, package.json `imports`). */
export { isAscii } from 'node:buffer';
