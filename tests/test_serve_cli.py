"""`solbench serve` and `solbench run --remote`: every bad flag is one line naming it, exit 2, no traceback,
and nothing is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from solbench.cli import app


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env=env)


@pytest.mark.parametrize("args, flag", [
    (["--host", "0.0.0.0"], "--api-keys"),
    (["--rate", "fast"], "--rate"),
    (["--rate", "0/second"], "--rate"),
    (["--max-body", "64parsecs"], "--max-body"),
    (["--allow", "10.0.0.0/99"], "--allow"),
    (["--tls-cert", "cert.pem"], "--tls-key"),
    (["--device", "tpu"], "--device"),
    (["--gpu-memory", "2"], "--gpu-memory"),
    (["--queue", "0"], "--queue"),
    (["--in-flight", "0"], "--in-flight"),
    (["--workers", "0"], "--workers"),
    (["--frontends", "0"], "--frontends"),
    (["--frontends", "65"], "--frontends"),
    (["--op-timeout", "0"], "--op-timeout"),
    (["--cpu-threads", "0"], "--cpu-threads"),
    (["--api-keys", "no-such-keys.txt"], "--api-keys"),
    (["--add-key", "ci"], "--api-keys"),
])
def test_bad_serve_flags(args: list[str], flag: str):
    res = invoke("serve", "--port", "1", *args)
    assert res.exit_code == 2, res.output
    assert flag in res.output and "Traceback" not in res.output


def test_add_key_prints_the_key_once_and_stores_its_hash(tmp_path: Path):
    keys = tmp_path / "keys.txt"
    res = invoke("serve", "--api-keys", str(keys), "--add-key", "ci")
    assert res.exit_code == 0, res.output
    key = res.stdout.strip().splitlines()[-1]
    assert key.startswith("sbk_") and key not in keys.read_text() and "ci sha256:" in keys.read_text()
    again = invoke("serve", "--api-keys", str(keys), "--add-key", "ci")
    assert again.exit_code == 2 and "already" in again.output


@pytest.mark.parametrize("args, flag, text", [
    (["--remote", "ftp://gpu-box"], "--remote", "not an http"),
    (["--remote", "http://127.0.0.1:9", "--ops", "add"], "--remote", "cannot reach"),
    (["--remote", "http://127.0.0.1:9", "--peaks", "{tmp}/mine.yaml"], "--peaks", "stays on this machine"),
    (["--remote", "http://127.0.0.1:9", "--device", "cpu"], "--device", "local option"),
    (["--remote", "http://127.0.0.1:9", "--rse", "-1"], "--rse", "positive"),
])
def test_bad_remote_runs(args: list[str], flag: str, text: str, tmp_path: Path):
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    res = invoke("run", "--out", str(tmp_path), *(a.format(tmp=tmp_path) for a in args))
    assert res.exit_code == 2, res.output
    assert flag in res.output and text in res.output and "Traceback" not in res.output
