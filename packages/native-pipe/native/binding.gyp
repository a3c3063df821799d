{
  "targets": [
    {
      "target_name": "tether_pipe",
      "sources": ["pipe.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
