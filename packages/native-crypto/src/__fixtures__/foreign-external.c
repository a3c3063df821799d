/*
 * Another addon's externals, for index.test.ts (compiled there with cc, loaded by a child node): what a
 * caller could hand the crypto addon by mistake or on purpose. Each points at bytes that, taken for the
 * crypto addon's context, would be a wild EVP_CIPHER_CTX pointer and "encrypt" set.
 *
 *   untagged() -> an external with no type tag
 *   tagged()   -> an external with a tag of its own
 *   object()   -> a plain object with that tag (an object, not an external)
 */
#include <node_api.h>
#include <stdint.h>

static struct {
  void *ctx;
  int encrypt;
} bogus = {(void *)(uintptr_t)0x10, 1};

static const napi_type_tag OTHER_TAG = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};

static napi_value untagged(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_external(env, &bogus, NULL, NULL, &result);
  return result;
}

static napi_value tagged(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_external(env, &bogus, NULL, NULL, &result);
  napi_type_tag_object(env, result, &OTHER_TAG);
  return result;
}

static napi_value object(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_object(env, &result);
  napi_type_tag_object(env, result, &OTHER_TAG);
  return result;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
      {"untagged", NULL, untagged, NULL, NULL, NULL, napi_default, NULL},
      {"tagged", NULL, tagged, NULL, NULL, NULL, napi_default, NULL},
      {"object", NULL, object, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods);
  return exports;
}
