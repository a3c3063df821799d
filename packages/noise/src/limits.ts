import { TAG_LENGTH_BYTES } from './crypto.js';

/** Noise spec §3: a handshake or transport message is at most 65 535 bytes. */
export const MAX_NOISE_MESSAGE_LENGTH = 65_535;
/** Largest plaintext that fits one transport message. */
export const MAX_TRANSPORT_PLAINTEXT = MAX_NOISE_MESSAGE_LENGTH - TAG_LENGTH_BYTES;
/** rendezvous.md §4.5/§4.7: the executor accepts a message-1 payload (the authorization) of at most 4096 bytes. */
export const MAX_HANDSHAKE_PAYLOAD = 4096;
