/*
 * Crypto for Tether's data path from the OpenSSL that Node itself links (its EVP symbols are exported by the
 * node binary, so nothing else is linked): in-place AEAD for Noise transport records, AES-256-GCM and
 * ChaCha20-Poly1305. node:crypto's Cipher allocates a fresh, zero-filled output buffer for every update();
 * here a record is sealed straight into the caller's buffer and opened into one, and the key schedule is
 * set up once per direction.
 *
 *   create(cipher: 0 = AES-256-GCM | 1 = ChaCha20-Poly1305, key: 32 bytes, encrypt: boolean) -> context
 *   seal(context, nonce: 12 bytes, ad, parts: Uint8Array[], out)   out = ciphertext of the joined parts ‖ tag
 *   open(context, nonce: 12 bytes, ad, sealed, out) -> boolean       out = plaintext (sealed.length - 16);
 *                                                                    false when authentication fails
 * `out` may be the very bytes being read (in place) or not overlap them at all.
 *
 * A context is an external tagged (napi_type_tag_object) as a sealing or an opening one, and every call
 * checks the tag before it touches the pointer: any other value from JavaScript (an object, another
 * addon's external, an opening context given to seal) is a TypeError, never a foreign pointer taken for
 * an EVP_CIPHER_CTX.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <node_api.h>
#include <openssl/evp.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define KEY_BYTES 32
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define MAX_PARTS 16

typedef struct {
  EVP_CIPHER_CTX *ctx;
  int encrypt;
} Aead;

/* Random, fixed: what napi_type_tag_object marks our externals with, one per direction. */
static const napi_type_tag SEALING_TAG = {0x7e7b3a1c9d2f4e05ULL, 0xa3c1d8e2f0b94c61ULL};
static const napi_type_tag OPENING_TAG = {0x2c5e8f13b7a04d92ULL, 0x96d4e1a07f3b5c28ULL};

static napi_value fail(napi_env env, const char *message) {
  napi_throw_error(env, "ERR_TETHER_AEAD", message);
  return NULL;
}

/* The bytes of a Uint8Array (or Int8Array, Uint8ClampedArray) argument; 0 for anything else. */
static int bytes_of(napi_env env, napi_value value, unsigned char **data, size_t *length) {
  bool is_typed = false;
  napi_typedarray_type type;
  void *raw;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) return 0;
  if (napi_get_typedarray_info(env, value, &type, length, &raw, NULL, NULL) != napi_ok) return 0;
  if (type != napi_uint8_array && type != napi_uint8_clamped_array && type != napi_int8_array) return 0;
  *data = raw;
  return 1;
}

static void finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Aead *aead = data;
  EVP_CIPHER_CTX_free(aead->ctx); /* cleanses the key schedule */
  free(aead);
}

/* The context behind `value` if it is an external of ours tagged for this direction, else NULL. */
static Aead *context_of(napi_env env, napi_value value, int encrypt) {
  napi_valuetype type;
  bool tagged = false;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_external) return NULL;
  if (napi_check_object_type_tag(env, value, encrypt ? &SEALING_TAG : &OPENING_TAG, &tagged) != napi_ok || !tagged) {
    return NULL;
  }
  void *data = NULL;
  if (napi_get_value_external(env, value, &data) != napi_ok) return NULL;
  return data;
}

/*
 * The arguments every record call starts with: (context, nonce, ad, …, out). Throws and returns 0 when one
 * is wrong; `encrypt` is the direction the context must have been made for.
 */
static int record_arguments(napi_env env, napi_callback_info info, napi_value *argv, int encrypt, const char *usage,
                            Aead **aead, unsigned char **nonce, unsigned char **ad, size_t *ad_length,
                            unsigned char **out, size_t *out_length) {
  size_t argc = 5;
  size_t nonce_length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) {
    fail(env, usage);
    return 0;
  }
  *aead = context_of(env, argv[0], encrypt);
  if (!*aead || (*aead)->encrypt != encrypt) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", encrypt ? "not a sealing context" : "not an opening context");
    return 0;
  }
  if (!bytes_of(env, argv[1], nonce, &nonce_length) || nonce_length != NONCE_BYTES) {
    fail(env, "nonce must be 12 bytes");
    return 0;
  }
  if (!bytes_of(env, argv[2], ad, ad_length)) {
    fail(env, "ad must be a Uint8Array");
    return 0;
  }
  if (!bytes_of(env, argv[4], out, out_length)) {
    fail(env, "out must be a Uint8Array");
    return 0;
  }
  return 1;
}

static napi_value create(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3) {
    return fail(env, "create(cipher, key, encrypt) takes three arguments");
  }
  int32_t which;
  bool encrypt;
  unsigned char *key;
  size_t key_length;
  if (napi_get_value_int32(env, argv[0], &which) != napi_ok || (which != 0 && which != 1)) {
    return fail(env, "cipher must be 0 (AES-256-GCM) or 1 (ChaCha20-Poly1305)");
  }
  if (!bytes_of(env, argv[1], &key, &key_length) || key_length != KEY_BYTES) return fail(env, "key must be 32 bytes");
  if (napi_get_value_bool(env, argv[2], &encrypt) != napi_ok) return fail(env, "encrypt must be a boolean");
  Aead *aead = malloc(sizeof *aead);
  if (!aead) return fail(env, "out of memory");
  aead->ctx = EVP_CIPHER_CTX_new();
  aead->encrypt = encrypt ? 1 : 0;
  const EVP_CIPHER *cipher = which == 0 ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
  if (!aead->ctx || EVP_CipherInit_ex(aead->ctx, cipher, NULL, key, NULL, aead->encrypt) != 1) {
    EVP_CIPHER_CTX_free(aead->ctx);
    free(aead);
    return fail(env, "cannot set up the cipher");
  }
  napi_value external;
  if (napi_create_external(env, aead, finalize, NULL, &external) != napi_ok) {
    finalize(env, aead, NULL);
    return fail(env, "cannot wrap the cipher context");
  }
  /* Untagged, it would be refused by every call; the finalizer frees it with the external. */
  if (napi_type_tag_object(env, external, aead->encrypt ? &SEALING_TAG : &OPENING_TAG) != napi_ok) {
    return fail(env, "cannot tag the cipher context");
  }
  return external;
}

/* Starts a record: the nonce, then the associated data. */
static int begin(Aead *aead, const unsigned char *nonce, const unsigned char *ad, size_t ad_length) {
  int written;
  if (EVP_CipherInit_ex(aead->ctx, NULL, NULL, NULL, nonce, aead->encrypt) != 1) return 0;
  if (ad_length > 0 && (ad_length > INT_MAX || EVP_CipherUpdate(aead->ctx, NULL, &written, ad, (int)ad_length) != 1)) {
    return 0;
  }
  return 1;
}

static napi_value seal(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  Aead *aead;
  unsigned char *nonce, *ad, *out;
  size_t ad_length, out_length;
  if (!record_arguments(env, info, argv, 1, "seal(context, nonce, ad, parts, out) takes five arguments", &aead, &nonce,
                        &ad, &ad_length, &out, &out_length)) {
    return NULL;
  }
  bool is_array;
  uint32_t count;
  if (napi_is_array(env, argv[3], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[3], &count) != napi_ok) {
    return fail(env, "parts must be an array of Uint8Array");
  }
  if (count > MAX_PARTS) return fail(env, "at most 16 parts");
  /* Every part (and the total) is checked before a byte is written. A part is either the very bytes it is
   * sealed into (in place) or clear of the output: a partial overlap would be overwritten before it is read. */
  unsigned char *data[MAX_PARTS];
  size_t length[MAX_PARTS];
  size_t total = 0;
  for (uint32_t i = 0; i < count; i++) {
    napi_value part;
    if (napi_get_element(env, argv[3], i, &part) != napi_ok || !bytes_of(env, part, &data[i], &length[i])) {
      return fail(env, "parts must be an array of Uint8Array");
    }
    if (length[i] > INT_MAX || total + length[i] + TAG_BYTES > out_length) {
      return fail(env, "out must be the parts' length + 16");
    }
    if (data[i] != out + total && length[i] > 0 && data[i] < out + out_length && out < data[i] + length[i]) {
      return fail(env, "a part partly overlaps the output");
    }
    total += length[i];
  }
  if (out_length != total + TAG_BYTES) return fail(env, "out must be the parts' length + 16");
  if (!begin(aead, nonce, ad, ad_length)) return fail(env, "cannot start the record");
  size_t at = 0;
  for (uint32_t i = 0; i < count; i++) {
    int written = 0;
    if (length[i] > 0 && EVP_CipherUpdate(aead->ctx, out + at, &written, data[i], (int)length[i]) != 1) {
      return fail(env, "encryption failed");
    }
    at += (size_t)written;
  }
  int tail = 0;
  if (EVP_CipherFinal_ex(aead->ctx, out + at, &tail) != 1) return fail(env, "encryption failed");
  at += (size_t)tail;
  if (at != total || EVP_CIPHER_CTX_ctrl(aead->ctx, EVP_CTRL_AEAD_GET_TAG, TAG_BYTES, out + at) != 1) {
    return fail(env, "encryption failed");
  }
  return NULL;
}

static napi_value open_record(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  Aead *aead;
  unsigned char *nonce, *ad, *sealed, *out;
  size_t ad_length, sealed_length, out_length;
  if (!record_arguments(env, info, argv, 0, "open(context, nonce, ad, sealed, out) takes five arguments", &aead, &nonce,
                        &ad, &ad_length, &out, &out_length)) {
    return NULL;
  }
  if (!bytes_of(env, argv[3], &sealed, &sealed_length)) return fail(env, "sealed must be a Uint8Array");
  if (sealed_length < TAG_BYTES) return fail(env, "sealed is shorter than the tag");
  size_t body = sealed_length - TAG_BYTES;
  if (body > INT_MAX || out_length != body) return fail(env, "out must be the sealed length - 16");
  if (out != sealed && out_length > 0 && out < sealed + sealed_length && sealed < out + out_length) {
    return fail(env, "out partly overlaps the input");
  }
  unsigned char tag[TAG_BYTES];
  memcpy(tag, sealed + body, TAG_BYTES);
  int written = 0, tail = 0;
  if (!begin(aead, nonce, ad, ad_length) ||
      EVP_CIPHER_CTX_ctrl(aead->ctx, EVP_CTRL_AEAD_SET_TAG, TAG_BYTES, tag) != 1) {
    return fail(env, "cannot start the record");
  }
  if (body > 0 && EVP_CipherUpdate(aead->ctx, out, &written, sealed, (int)body) != 1) return fail(env, "decryption failed");
  int ok = EVP_CipherFinal_ex(aead->ctx, out + written, &tail) == 1 && (size_t)(written + tail) == body;
  napi_value result;
  napi_get_boolean(env, ok, &result);
  return result;
}

/*
 * A recording's line (@tether/recording, asciicast v2) made from bytes, and its SHA-256 chain link, in one call:
 *
 *   castLine(previous: 32 bytes, head, body, tail, link: 32 bytes, out, offset) -> bytes written
 *     out[offset…] = head ‖ json(body) ‖ tail ‖ "\n"     link = SHA-256(previous ‖ that line without its "\n")
 *
 * json(body) is what JSON.stringify writes inside a string's quotes for the text `body` holds, given as
 * bytes: `"` and `\` escaped, \b \f \n \r \t short, every other byte below 0x20 as \u00xx (lowercase hex),
 * everything else (DEL, and every byte of a multi-byte character) as it is. That is the same bytes as
 * Buffer.from(JSON.stringify(text)) only when `body` is valid UTF-8 (which the caller checks: buffer.isUtf8):
 * invalid bytes would be copied, not replaced by U+FFFD. `previous` and `link` may be the same bytes.
 *
 * `out` must have room for the longest such line from `offset` (head + 6 × body + tail + 1 bytes), so that
 * nothing is counted first: the caller writes lines one after another into a large buffer (measured: counting
 * the escapes first, and a buffer allocated per line, cost a quarter of the line). It must not overlap the
 * other arguments.
 *
 * Measured (bench/src/recording-line.ts): JSON.stringify of a decoded string costs ~1.4 ns per byte of text,
 * this escape ~0.15; the hash (OpenSSL's SHA-256, SHA-NI where the CPU has it) is then most of a line's cost,
 * taken block by block while the escaped bytes are still in cache.
 */
static const char HEX[] = "0123456789abcdef";

/* What json() adds for a byte: 0 (copied), 1 (\" \\ \b \f \n \r \t) or 5 (\u00xx). */
static const unsigned char ESCAPE_EXTRA[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    ['"'] = 1, ['\\'] = 1,
};

#ifdef __SSE2__
/* Bit i set when byte i of the 16 needs escaping (below 0x20, `"` or `\`). */
static inline unsigned special_mask(__m128i v) {
  __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
  __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
  __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
  return (unsigned)_mm_movemask_epi8(_mm_or_si128(control, _mm_or_si128(quote, backslash)));
}
#endif

/* Writes the escape of one byte that needs it; returns the next free byte. */
static inline unsigned char *escape_byte(unsigned char *at, unsigned char byte) {
  *at++ = '\\';
  switch (byte) {
    case '"': *at++ = '"'; break;
    case '\\': *at++ = '\\'; break;
    case '\b': *at++ = 'b'; break;
    case '\f': *at++ = 'f'; break;
    case '\n': *at++ = 'n'; break;
    case '\r': *at++ = 'r'; break;
    case '\t': *at++ = 't'; break;
    default:
      *at++ = 'u';
      *at++ = '0';
      *at++ = '0';
      *at++ = (unsigned char)HEX[byte >> 4];
      *at++ = (unsigned char)HEX[byte & 15];
  }
  return at;
}

/*
 * Writes json(body[from, to)) at out; returns the bytes written. 16 bytes are stored at a time, also when fewer
 * of them are kept (up to the first that needs escaping): there is always room, as every byte still to be read
 * writes at least one (measured: a third faster than finding each run and memcpy-ing it).
 */
static size_t escape_into(unsigned char *out, const unsigned char *body, size_t from, size_t to) {
  unsigned char *at = out;
  size_t i = from;
#ifdef __SSE2__
  while (i + 16 <= to) {
    __m128i v = _mm_loadu_si128((const __m128i *)(body + i));
    _mm_storeu_si128((__m128i *)at, v);
    unsigned mask = special_mask(v);
    if (!mask) {
      i += 16;
      at += 16;
      continue;
    }
    unsigned kept = (unsigned)__builtin_ctz(mask);
    at = escape_byte(at + kept, body[i + kept]);
    i += kept + 1;
  }
#endif
  for (; i < to; i++) {
    unsigned char byte = body[i];
    if (ESCAPE_EXTRA[byte]) {
      at = escape_byte(at, byte);
    } else {
      *at++ = byte;
    }
  }
  return (size_t)(at - out);
}

/* Body bytes escaped (and hashed) per step: the escaped block is hashed while it is still in cache. */
#define CAST_BLOCK 8192

/* Whether [a, a + a_length) and [b, b + b_length) share a byte. */
static int overlaps(const unsigned char *a, size_t a_length, const unsigned char *b, size_t b_length) {
  return a_length > 0 && b_length > 0 && a < b + b_length && b < a + a_length;
}

static napi_value cast_line(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 7) {
    return fail(env, "castLine(previous, head, body, tail, link, out, offset) takes seven arguments");
  }
  unsigned char *previous, *head, *body, *tail, *link, *out;
  size_t previous_length, head_length, body_length, tail_length, link_length, out_length;
  int64_t offset;
  if (!bytes_of(env, argv[0], &previous, &previous_length) || previous_length != 32) {
    return fail(env, "previous must be 32 bytes");
  }
  if (!bytes_of(env, argv[1], &head, &head_length) || !bytes_of(env, argv[2], &body, &body_length) ||
      !bytes_of(env, argv[3], &tail, &tail_length)) {
    return fail(env, "head, body and tail must be Uint8Arrays");
  }
  if (!bytes_of(env, argv[4], &link, &link_length) || link_length != 32) return fail(env, "link must be 32 bytes");
  if (!bytes_of(env, argv[5], &out, &out_length)) return fail(env, "out must be a Uint8Array");
  if (napi_get_value_int64(env, argv[6], &offset) != napi_ok || offset < 0 || (uint64_t)offset > out_length) {
    return fail(env, "offset must be within out");
  }
  if (body_length > (SIZE_MAX - head_length - tail_length - 1) / 6 ||
      head_length + 6 * body_length + tail_length + 1 > out_length - (size_t)offset) {
    return fail(env, "out must have room for head + 6 x body + tail + 1 bytes from offset");
  }
  unsigned char *line = out + offset;
  size_t room = out_length - (size_t)offset;
  if (overlaps(line, room, previous, 32) || overlaps(line, room, head, head_length) ||
      overlaps(line, room, body, body_length) || overlaps(line, room, tail, tail_length) ||
      overlaps(line, room, link, 32)) {
    return fail(env, "out overlaps another argument");
  }
  /* `previous` is read before `link` is written (they may be the same bytes). */
  unsigned char chained[32];
  unsigned int digest_length = 0;
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  int ok = sha != NULL && EVP_DigestInit_ex(sha, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(sha, previous, 32) == 1;
  memcpy(line, head, head_length);
  size_t at = head_length, hashed = 0;
  for (size_t from = 0; ok && from < body_length; from += CAST_BLOCK) {
    size_t to = body_length - from > CAST_BLOCK ? from + CAST_BLOCK : body_length;
    at += escape_into(line + at, body, from, to);
    ok = EVP_DigestUpdate(sha, line + hashed, at - hashed) == 1;
    hashed = at;
  }
  if (ok) {
    memcpy(line + at, tail, tail_length);
    at += tail_length;
    line[at] = '\n';
    ok = EVP_DigestUpdate(sha, line + hashed, at - hashed) == 1 && EVP_DigestFinal_ex(sha, chained, &digest_length) == 1 &&
         digest_length == 32;
  }
  EVP_MD_CTX_free(sha);
  if (!ok) return fail(env, "cannot hash the line");
  memcpy(link, chained, 32);
  napi_value written;
  if (napi_create_double(env, (double)(at + 1), &written) != napi_ok) return fail(env, "cannot return the length");
  return written;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
      {"create", NULL, create, NULL, NULL, NULL, napi_default, NULL},
      {"seal", NULL, seal, NULL, NULL, NULL, napi_default, NULL},
      {"open", NULL, open_record, NULL, NULL, NULL, napi_default, NULL},
      {"castLine", NULL, cast_line, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods) != napi_ok) return NULL;
  return exports;
}
