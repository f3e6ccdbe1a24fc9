"""`solbench serve`: the kernel library and the benchmark as an HTTP service (FastAPI + uvicorn).

    server.py   ServeConfig (the flags) -> Services (everything below), and the uvicorn process
    app.py      the FastAPI app: routes, and the allowlist / API key / rate / body-size checks
    auth.py     API keys (hashed, constant-time compare) and the client allowlist
    limits.py   rate limiting (the `limits` package), body size, the per-request memory budget
    wire.py     safetensors / JSON request formats, checked against the op's spec (no torch)
    tensors.py  the worker's half: request bytes -> tensors, outputs -> reply bytes
    oplib.py    the op registry: which ops are served, and which implementation answers each
    opsvc.py    one device's bounded queue and the worker process behind it (restarted when it dies)
    opworker.py the worker process: the only one that touches the GPU
    runs.py     benchmark runs queued through solbench.pipeline
    frontends.py  --frontends N: N uvicorn processes on one port (SO_REUSEPORT), supervised
    shared.py   the file in /dev/shm those front ends share;  sharedrate.py: their one rate limit
    runfiles.py their runs, one JSON file each under --out/runs
    metrics.py  Prometheus metrics (with --frontends, merged over the front ends)
    faults.py   fault-injection ops (--test-ops only)

Importing this package imports none of the third-party packages: the modules that need them do.
"""
