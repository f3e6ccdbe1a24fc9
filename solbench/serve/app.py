"""The FastAPI app: routes, and the checks every request passes first (allowlist 403, API key 401, rate
limit 429, body size 413). The work behind the routes is the services' (solbench/serve/server.py).

Every error is JSON: {"error": message, "field": the request field it is about (or null), "status": code}.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from solbench.errors import UserError
from solbench.runrequest import RequestError
from solbench.serve import wire
from solbench.serve.auth import bearer_token
from solbench.serve.limits import BodyTooLarge, read_body
from solbench.serve.metrics import CONTENT_TYPE
from solbench.serve.opsvc import NotReady, QueueFull
from solbench.serve.runs import RunQueueFull, request_error_field
from solbench.serve.server import Services

RUN_BODY_LIMIT = 1 << 20
KWARGS_HEADER = "x-solbench-kwargs"
SAFETENSORS_TYPE = "application/octet-stream"


class ApiError(Exception):
    def __init__(self, status: int, message: str, field_: str | None = None, headers: dict[str, str] | None = None):
        self.status, self.message, self.field, self.headers = status, message, field_, headers or {}
        super().__init__(message)


def _error(status: int, message: str, field_: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field_, "status": status}, status_code=status, headers=headers)


def create_app(services: Services) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.start()
        try:
            yield
        finally:
            await asyncio.to_thread(services.stop)

    # No /docs or /openapi.json: every route of this app is listed in README.md, and an unauthenticated
    # schema page is one more thing exposed.
    app = FastAPI(title="solbench", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    _handlers(app, services)
    _health_routes(app, services)
    _op_routes(app, services)
    _run_routes(app, services)
    return app


def _handlers(app: FastAPI, services: Services) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.field, {**exc.headers, **_frontend(services)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        return _error(422, str(first.get("msg", "invalid request")), ".".join(map(str, first.get("loc", ()))))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        services.log.exception("internal error: %s", type(exc).__name__)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")


def _guard(request: Request, services: Services, key: bool = True, rate: bool = True) -> str:
    """Allowlist (403), then API key (401), then rate limit (429); the caller's identity for the limiter
    and for who owns a run: the key's name, or the client address when the server has no keys."""
    host = request.client.host if request.client else None
    if not services.allowlist.allows(host):
        services.log.warning("403: client %s is not in --allow", host)
        raise ApiError(403, f"client address {host} is not allowed (--allow {services.allowlist.describe()})")
    identity, own_rate = f"ip:{host}", None
    if key and services.keys is not None:
        found = services.keys.identify(bearer_token(request.headers.get("authorization")))
        if found is None:
            given = "a key the server does not know" if request.headers.get("authorization") else "no key"
            services.log.warning("401: %s from %s", given, host)   # never the key itself
            raise ApiError(401, f"{given}: send 'Authorization: Bearer <API key>'",
                           headers={"WWW-Authenticate": "Bearer"})
        identity, own_rate = f"key:{found.name}", found.rate
    if rate:
        wait = services.limiter.hit(identity, own_rate)
        if wait is not None:
            raise ApiError(429, f"rate limit {own_rate or services.limiter.rate} reached; retry in {wait:.0f} s",
                           headers={"Retry-After": str(int(wait))})
    return identity


def _health_routes(app: FastAPI, services: Services) -> None:
    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        _guard(request, services, key=False, rate=False)
        return JSONResponse({"ok": True}, headers=_frontend(services))

    @app.get("/readyz")
    async def readyz(request: Request, memory: bool = False) -> JSONResponse:
        """Ready: the worker has probed the device and loaded the kernel library. `?memory=1` also asks the
        worker for its memory figures (queued behind the requests waiting)."""
        _guard(request, services, key=False, rate=False)
        ops = services.ops
        h = ops.hello or {}
        body: dict[str, Any] = {
            "ready": services.ready,
            "device": ops.device, "kind": ops.kind, "name": h.get("name"), "library_ok": ops.library_ok,
            "library_error": h.get("library_error"), "start_error": ops.start_error, "worker_pid": h.get("pid"),
            "worker_pids": ops.pids,
            "restarts": ops.restarts, "queue": ops.depth, "queue_size": ops.queue_size, "served": ops.served,
            "runs_queued": services.runs.depth,
        }
        if services.place is not None and services.area is not None:
            # This process's figures above; every front end's as each last published it below.
            body.update(frontend=services.place.index, pid=os.getpid(),
                        frontends=[f.to_json() for f in services.area.frontends()])
        if memory and ops.ready:
            body["worker"] = await ops.stats()
        return JSONResponse(body, status_code=200 if body["ready"] else 503, headers=_frontend(services))

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        _guard(request, services, rate=False)
        # With front ends, the whole server's figures, whichever front end answers (metrics.py).
        return Response(services.metrics.render(), media_type=CONTENT_TYPE, headers=_frontend(services))


def _op_routes(app: FastAPI, services: Services) -> None:
    @app.get("/v1/ops")
    async def list_ops(request: Request) -> dict[str, Any]:
        _guard(request, services)
        kind, lib = services.ops.kind, services.ops.library_ok
        return {"device": services.ops.device, "ready": services.ops.ready,
                "ops": [o.describe(kind or "cpu", lib) if kind else {**o.describe("cpu", False), "implementation": None}
                        for o in services.library.ops.values()]}

    async def run_op(request: Request) -> Response:
        started = time.perf_counter()
        op = request.path_params["op"]
        label, status, kernel_s = "-", 500, None
        try:
            _guard(request, services)
            served = services.library.get(op)
            if served is None:
                raise ApiError(404, f"no op '{op}' on this server (GET /v1/ops lists them)", "op")
            label = op
            response, kernel_s = await _run_op(request, services, served, started)
            status = 200
            return response
        except ApiError as exc:
            status = exc.status
            raise
        finally:
            services.metrics.observe("ops", label, status, time.perf_counter() - started, kernel_s)

    # The hot path is a plain Starlette route: FastAPI's dependency solving costs more per request than
    # everything this handler does before it queues the work, and the handler takes only the Request.
    app.add_route("/v1/ops/{op}", run_op, methods=["POST"])


async def _run_op(request: Request, services: Services, served: Any, started: float) -> tuple[Response, float | None]:
    body = await _body(request, services.config.max_body)
    ops = services.ops
    try:
        kwargs = wire.parse_kwargs(request.headers.get(KWARGS_HEADER) or request.query_params.get("kwargs"), "kwargs")
        is_json = request.headers.get("content-type", "").startswith("application/json")
        decoded = wire.decode_json(body, kwargs) if is_json else wire.decode_safetensors(body, kwargs)
        if ops.hello is None:
            raise ApiError(503, f"the worker for {ops.device} is starting: {ops.start_error or 'not ready yet'}",
                           headers={"Retry-After": "2"})
        bound = wire.bind(served.spec, decoded, ops.kind or "cpu", ops.hello.get("capability"))
    except wire.WireError as exc:
        raise ApiError(422, exc.message, exc.field) from None
    choice = served.choose(bound.dtype, ops.kind or "cpu", ops.library_ok)
    if choice is None:
        raise ApiError(422, f"op '{served.name}' has nothing that runs {bound.dtype} on {ops.device}", "dtype")
    budget = ops.budget()
    refusal = budget.refuse(bound.device_bytes) if budget else None
    if refusal:
        raise ApiError(422, refusal, "inputs")
    meta = {"type": "op", "op": served.name, "call": choice.call.name, "kwargs": choice.call.resolved_kwargs(bound.env),
            "form": decoded.form, "inputs": bound.inputs, "metas": decoded.tensors, "values": decoded.values,
            "ranges": bound.ranges, "outputs": [(k, d, s) for k, (d, s) in bound.outputs.items()]}
    try:
        reply = await ops.call(meta, body if decoded.form == "safetensors" else b"")
    except QueueFull as exc:
        raise ApiError(503, str(exc), headers={"Retry-After": "1"}) from None
    except NotReady as exc:
        raise ApiError(503, str(exc), headers={"Retry-After": "5"}) from None
    if reply.status != 200:
        headers = {"Retry-After": "1"} if reply.status == 503 else None
        raise ApiError(reply.status, reply.error, reply.where, headers)
    total = time.perf_counter() - started
    timing = f"device;dur={(reply.kernel_s or 0) * 1e3:.4f}, worker;dur={(reply.worker_s or 0) * 1e3:.4f}, " \
             f"total;dur={total * 1e3:.4f}"
    headers = {"X-Solbench-Impl": choice.call.name, "X-Solbench-Impl-Kind": choice.kind,
               "X-Solbench-Impl-Fn": choice.call.fn, "X-Solbench-Device": ops.device, "X-Solbench-Dtype": bound.dtype,
               "X-Solbench-Params": json.dumps(bound.params, separators=(",", ":")), "Server-Timing": timing}
    if choice.note:
        headers["X-Solbench-Note"] = choice.note
    headers.update(_frontend(services))
    media = "application/json" if decoded.form == "json" else SAFETENSORS_TYPE
    # A memoryview: Starlette sends bytes or memoryview as they are, and the body is a bytearray (frames.py).
    return Response(memoryview(reply.body), media_type=media, headers=headers), reply.kernel_s


async def _body(request: Request, limit: int) -> bytes:
    try:
        return await read_body(request.stream(), request.headers.get("content-length"), limit)
    except BodyTooLarge as exc:
        raise ApiError(413, str(exc), "body") from None


def _run_routes(app: FastAPI, services: Services) -> None:
    @app.post("/v1/runs", status_code=202)
    async def submit_run(request: Request) -> JSONResponse:
        owner = _guard(request, services)
        body = await _body(request, RUN_BODY_LIMIT)
        try:
            doc = json.loads(body or b"{}")
        except ValueError as exc:
            raise ApiError(422, f"not valid JSON: {exc}", "body") from None
        try:
            job = await asyncio.to_thread(services.runs.submit, doc, owner)
        except (RequestError, UserError) as exc:
            field_, message = request_error_field(exc)
            raise ApiError(422, message, field_) from None
        except RunQueueFull as exc:
            raise ApiError(503, str(exc), headers={"Retry-After": "30"}) from None
        return JSONResponse(job.to_json(), status_code=202, headers={"Location": f"/v1/runs/{job.id}",
                                                                      **_frontend(services)})

    @app.get("/v1/runs/{run_id}")
    async def run_status(run_id: str, request: Request) -> JSONResponse:
        return JSONResponse(_job(request, services, run_id).to_json(), headers=_frontend(services))

    @app.get("/v1/runs/{run_id}/results")
    async def run_results(run_id: str, request: Request) -> Response:
        job = _job(request, services, run_id)
        if job.state != "done" or job.results is None:
            why = f": {job.error}" if job.error else f"; poll GET /v1/runs/{run_id}"
            message = f"run {run_id} is {job.state}{why}"
            raise ApiError(409, message)
        return FileResponse(job.results, media_type="application/json", filename=job.results.name,
                            headers=_frontend(services))


def _frontend(services: Services) -> dict[str, str]:
    """X-Solbench-Frontend: which front end answered (--frontends N > 1 only)."""
    return {"X-Solbench-Frontend": str(services.place.index)} if services.place is not None else {}


def _job(request: Request, services: Services, run_id: str) -> Any:
    owner = _guard(request, services)
    job = services.runs.get(run_id, owner)
    if job is None:
        raise ApiError(404, f"no run '{run_id}' of yours on this server", "run_id")
    return job
