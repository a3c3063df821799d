{
  "targets": [
    {
      "target_name": "tether_crypto",
      "sources": ["crypto.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
