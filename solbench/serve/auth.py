"""Who may call the service: API keys from a file, stored hashed and compared in constant time, and an
allowlist of client networks.

The key file holds one key a line as `NAME sha256:<64 hex digits> [rate=50/second]` (the rate, when
given, replaces --rate for that key); the key itself is shown once, when `solbench serve --add-key NAME`
makes it, and never stored. Keys are 32 random bytes, so a plain SHA-256
(not a slow password hash) is enough: there is nothing to guess. A request's key is hashed and compared
with every stored hash (no early exit), so the time taken says nothing about which key was close.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from solbench.errors import UserError

KEY_PREFIX = "sbk_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_LINE = re.compile(r"^(?P<name>\S+)\s+sha256:(?P<hex>[0-9a-f]{64})(?:\s+rate=(?P<rate>\S+))?$")
FILE_HEADER = ("# solbench serve API keys, one a line: NAME sha256:<hex of the key's SHA-256>.\n"
               "# Add one with: solbench serve --add-key NAME --api-keys FILE (prints the key once).\n")


def hash_key(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True)
class ApiKey:
    name: str
    digest: bytes
    rate: str | None = None       # this key's own rate limit (None: the server's --rate)


@dataclass(frozen=True)
class KeyRing:
    keys: tuple[ApiKey, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def identify(self, token: str | None) -> ApiKey | None:
        """The key `token` is, or None; every stored key is compared, whatever matches."""
        if not token:
            return None
        digest = hash_key(token)
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        return found

    @classmethod
    def load(cls, path: Path) -> "KeyRing":
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UserError(f"cannot read the key file: {exc.strerror}", file=path, field="--api-keys") from None
        keys: list[ApiKey] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keys.append(_parse_line(line, path, number))
        names = [k.name for k in keys]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UserError(f"key name '{twice[0]}' is used twice", file=path, field="--api-keys")
        if not keys:
            raise UserError("the key file holds no keys (add one with solbench serve --add-key NAME "
                            "--api-keys FILE)", file=path, field="--api-keys")
        return cls(tuple(keys))


def _parse_line(line: str, path: Path, number: int) -> ApiKey:
    m = _LINE.match(line)
    if not m:
        # Never echo the line: it may be a key someone pasted in by mistake.
        raise UserError(f"line {number} is not 'NAME sha256:<64 lowercase hex digits> [rate=N/unit]' (keys are stored "
                        f"hashed; make entries with solbench serve --add-key NAME)", file=path,
                        field="--api-keys")
    if not _NAME.match(m["name"]):
        raise UserError(f"line {number}: key name must be letters, digits, '_', '.' or '-' (at most 64)",
                        file=path, field="--api-keys")
    if m["rate"]:
        from solbench.serve.limits import check_rate

        check_rate(m["rate"], f"line {number}'s rate", path)
    return ApiKey(m["name"], bytes.fromhex(m["hex"]), m["rate"])


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_key(path: Path, name: str) -> str:
    """Make a key called `name`, append its hash to the key file (created private), return the key."""
    if not _NAME.match(name):
        raise UserError(f"'{name}' is not a key name (letters, digits, '_', '.' or '-', at most 64)",
                        field="--add-key")
    path = Path(path)
    if path.exists() and _has_keys(path) and name in KeyRing.load(path).names:
        raise UserError(f"a key named '{name}' is already in the file", file=path, field="--add-key")
    token = new_key()
    fresh = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        if fresh:
            f.write(FILE_HEADER)
        f.write(f"{name} sha256:{hash_key(token).hex()}\n")
    return token


def _has_keys(path: Path) -> bool:
    return any(line.strip() and not line.strip().startswith("#") for line in path.read_text().splitlines())


def bearer_token(header: str | None) -> str | None:
    """The key in an `Authorization: Bearer KEY` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


@dataclass(frozen=True)
class Allowlist:
    """Client networks allowed to connect; empty allows every address."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, value: str | None) -> "Allowlist":
        if value is None or not value.strip():
            return cls()
        nets = []
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            try:
                nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise UserError(f"'{item}' is not an IP network (CIDR like 10.0.0.0/8 or an address)",
                                field="--allow") from None
        return cls(tuple(nets))

    def allows(self, host: str | None) -> bool:
        if not self.networks:
            return True
        if not host:
            return False
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped    # ::ffff:10.1.2.3 is the IPv4 client 10.1.2.3 on a dual-stack socket
        return any(ip in net for net in self.networks if net.version == ip.version)

    def describe(self) -> str:
        return ", ".join(str(n) for n in self.networks) or "any address"
