{
  "targets": [
    {
      "target_name": "tether_aead",
      "sources": ["aead.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
