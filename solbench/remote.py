"""The client of a `solbench serve`: submit a benchmark run, follow it, download its results file.

This is what `solbench run --remote URL` uses on a machine without a GPU (a CI runner): it needs httpx
and nothing of the server's. The API key comes from $SOLBENCH_API_KEY, never from a flag (flags end up in
shell histories and process lists). For a server with a self-signed certificate, point $SSL_CERT_FILE at
the certificate (httpx trusts what that file holds).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from solbench import results
from solbench.errors import UserError
from solbench.jsonio import write_json_atomic
from solbench.runrequest import RunRequest

API_KEY_ENV = "SOLBENCH_API_KEY"
POLL_S = 1.0
_RETRIES = 20          # 429s waited out (Retry-After) before giving up


@dataclass(frozen=True)
class Fetched:
    run: results.Run
    path: Path           # the server's results file, saved as it came


class Remote:
    def __init__(self, url: str, key: str | None = None, timeout_s: float = 60.0, transport: Any = None):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise UserError(f"'{url}' is not an http:// or https:// URL", field="--remote")
        self.url = url.rstrip("/")
        key = key if key is not None else os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._httpx = httpx
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Remote":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, request: RunRequest) -> dict[str, Any]:
        return self._json("POST", "/v1/runs", json=request.to_json())

    def status(self, run_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/runs/{run_id}")

    def wait(self, run_id: str, on_status: Callable[[dict[str, Any]], None] | None = None,
             poll_s: float = POLL_S) -> dict[str, Any]:
        while True:
            status = self.status(run_id)
            if on_status:
                on_status(status)
            if status["state"] == "done":
                return status
            if status["state"] == "failed":
                raise UserError(f"the run failed on the server: {status.get('error')}", field="--remote")
            time.sleep(poll_s)

    def fetch(self, run_id: str, out_dir: Path) -> Fetched:
        """Download the results file into out_dir (as the server wrote it) and read it back, checked."""
        response = self._send("GET", f"/v1/runs/{run_id}/results")
        try:
            data = response.json()
        except ValueError:
            raise UserError("the server's results file is not JSON", field="--remote") from None
        name = str(data.get("run_id") or run_id) if isinstance(data, dict) else run_id
        path = write_json_atomic(Path(out_dir) / f"{Path(name).name}.json", data)
        return Fetched(results.load_run(path), path)

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        data = self._send(method, path, **kwargs).json()
        if not isinstance(data, dict):
            raise UserError(f"unexpected answer from {self.url}{path}", field="--remote")
        return data

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        for _ in range(_RETRIES):
            try:
                response = self.client.request(method, path, **kwargs)
            except self._httpx.HTTPError as exc:
                raise UserError(f"cannot reach {self.url}: {type(exc).__name__}: {exc}", field="--remote") from None
            if response.status_code == 429:
                time.sleep(float(response.headers.get("Retry-After", "1")))
                continue
            if response.status_code >= 400:
                raise _refusal(self.url, response)
            return response
        raise UserError(f"{self.url} kept answering 429 (rate limit): try again later", field="--remote")


def _refusal(url: str, response: Any) -> UserError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    message = body.get("error") if isinstance(body, dict) else None
    message = message or response.text[:200] or response.reason_phrase
    status = response.status_code
    if status == 401:
        return UserError(f"{url} refused the API key ({message}): set ${API_KEY_ENV} to a key from the server's "
                         f"key file", field="--remote")
    if status == 403:
        return UserError(f"{url} does not allow this machine's address ({message})", field="--remote")
    if status == 422:
        field_ = body.get("field") if isinstance(body, dict) else None
        return UserError(f"the server refused the run: {message}", field=field_ or "--remote")
    return UserError(f"{url} answered {status}: {message}", field="--remote")
