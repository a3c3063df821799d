export { firstLink, nextLink, publicKeyOf, publicKeyText, SEAL_TYPE, type Seal, sealSigned } from './chain.js';
export { type PlayOptions, type PlayResult, playRecording } from './play.js';
export { type VerifyOptions, type VerifyProblem, type VerifyReport, verifyRecording } from './verify.js';
export {
  type CastHeader,
  CastWriter,
  type CastWriterOptions,
  EXIT_TYPE,
  FROM_TYPE,
  GAP_TYPE,
  LineSlab,
} from './writer.js';
