"""Server settings from a TOML file (``ldp-aggregator serve --config PATH``), overridden by options.

Example (every key optional; relative paths are relative to the file's directory)::

    db = "ldp-data/ldp.sqlite3"      # or, for replicas sharing PostgreSQL (not both):
    # store = "postgresql://ldp@db.example/ldp"
    listen = "0.0.0.0:50051"         # anything but loopback needs at least one access token
    retain_raw = true
    raw_retention_days = 30          # raw reports older than this are purged (0 or absent: kept)
    purge_interval_s = 3600
    max_message_bytes = 16777216
    metrics_port = 9464              # Prometheus /metrics on 127.0.0.1 (0 or absent: off)
    web_port = 8080                  # the read-only web view (docs/web.md); absent: off, 0: a free port
    web_host = "127.0.0.1"           # anything but loopback needs at least one access token
    token_refresh_s = 1.0
    grace_s = 10.0

    [tls]
    cert = "server.pem"
    key = "server.key"
    client_ca = "clients-ca.pem"     # present: clients must show a certificate it signed (mutual TLS)

    [limits]
    requests_per_s = 0               # per token; 0 = unlimited
    reports_per_s = 0
    burst_s = 1.0
    max_batch_reports = 1000000
    max_candidates = 10000
    max_accumulator_bytes = 134217728  # largest accumulator of a new campaign (128 MiB)
    failed_auth_per_s = 1.0          # calls without a valid token per client address; 0 = unlimited
    failed_auth_burst = 20

    [connections]
    max_connections = 1000           # lowered to the open-file limit minus a reserve if that is smaller
    max_concurrent_streams = 100     # calls in flight per connection
    max_concurrent_rpcs = 10000      # calls in flight in all
    handshake_timeout_s = 10.0       # a connection that has not completed its handshake is closed
    idle_timeout_s = 300.0           # a connection without calls for this long is closed
    keepalive_s = 60.0               # keepalive pings during calls

    [log]
    format = "json"                  # or "text"
    level = "info"

Unknown keys and values of the wrong type are errors naming the key, so a typo never silently leaves
a security setting at its default.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ldp_aggregator.logs import LOG_FORMATS
from ldp_aggregator.ratelimit import Limits
from ldp_aggregator.server import ServerConfig
from ldp_client.errors import InvalidParameterError

__all__ = ["SETTING_KEYS", "Settings", "load_settings"]

_LOG_LEVELS: Final = ("debug", "info", "warning", "error")

# Flat setting name -> (expected type, where it goes). Tables in the file map to prefixes.
_PATHS: Final = frozenset({"db", "tls_cert", "tls_key", "tls_client_ca"})
_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "db": (str,),
    "store": (str,),
    "listen": (str,),
    "retain_raw": (bool,),
    "max_message_bytes": (int,),
    "grace_s": (int, float),
    "metrics_port": (int,),
    "web_port": (int,),
    "web_host": (str,),
    "raw_retention_days": (int, float),
    "purge_interval_s": (int, float),
    "token_refresh_s": (int, float),
    "tls_cert": (str,),
    "tls_key": (str,),
    "tls_client_ca": (str,),
    "requests_per_s": (int, float),
    "reports_per_s": (int, float),
    "burst_s": (int, float),
    "max_batch_reports": (int,),
    "max_candidates": (int,),
    "max_accumulator_bytes": (int,),
    "failed_auth_per_s": (int, float),
    "failed_auth_burst": (int,),
    "max_connections": (int,),
    "max_concurrent_streams": (int,),
    "max_concurrent_rpcs": (int,),
    "handshake_timeout_s": (int, float),
    "idle_timeout_s": (int, float),
    "keepalive_s": (int, float),
    "log_format": (str,),
    "log_level": (str,),
}
#: Every setting name (as in overrides; in the file, ``tls_*``, ``log_*`` and the limits are in tables).
SETTING_KEYS: Final = tuple(_TYPES)
_TABLES: Final[Mapping[str, Mapping[str, str]]] = {
    "tls": {"cert": "tls_cert", "key": "tls_key", "client_ca": "tls_client_ca"},
    "limits": {
        k: k
        for k in (
            "requests_per_s",
            "reports_per_s",
            "burst_s",
            "max_batch_reports",
            "max_candidates",
            "max_accumulator_bytes",
            "failed_auth_per_s",
            "failed_auth_burst",
        )
    },
    "connections": {
        k: k
        for k in (
            "max_connections",
            "max_concurrent_streams",
            "max_concurrent_rpcs",
            "handshake_timeout_s",
            "idle_timeout_s",
            "keepalive_s",
        )
    },
    "log": {"format": "log_format", "level": "log_level"},
}
_LIMIT_KEYS: Final = frozenset(_TABLES["limits"].values())
# Keys that live in a table of the file, never at its top level.
_TABLE_KEYS: Final = frozenset(k for table in _TABLES.values() for k in table.values())


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything ``serve`` needs: the server's configuration and how to log."""

    server: ServerConfig = field(default_factory=ServerConfig)
    log_format: str = "text"
    log_level: str = "info"


def _flatten(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise InvalidParameterError(f"{source}: {key}", value, "a table")
            for sub, sub_value in value.items():
                name = _TABLES[key].get(sub)
                if name is None:
                    allowed = ", ".join(_TABLES[key])
                    raise InvalidParameterError(
                        f"{source}: {key}.{sub}", sub_value, f"a known key ({allowed})"
                    )
                flat[name] = sub_value
        elif key in _TYPES and key not in _TABLE_KEYS:
            flat[key] = value
        else:
            allowed = ", ".join([k for k in _TYPES if k not in _TABLE_KEYS])
            tables = ", ".join(f"[{t}]" for t in _TABLES)
            raise InvalidParameterError(
                f"{source}: {key}", value, f"a known key ({allowed}) or table ({tables})"
            )
    return flat


def _check_type(source: str, key: str, value: Any) -> None:
    types = _TYPES[key]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join(t.__name__ for t in types)
        raise InvalidParameterError(f"{source}: {key}", value, f"a {names}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError(f"{source}: {key}", value, "a finite number")


def load_settings(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from the TOML file at ``path`` (if any), then ``overrides`` (None values are ignored).

    Args:
        path: A TOML file as in the module docstring.
        overrides: Setting name (see :data:`SETTING_KEYS`) -> value, e.g. from command-line options; a
            value of None means "not given".

    Raises:
        InvalidParameterError: Unreadable file, unknown key, wrong type or invalid value (named).
    """
    merged: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        try:
            doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidParameterError("config", str(path), f"a readable TOML file ({exc})") from None
        base = Path(path).resolve().parent
        for key, value in _flatten(doc, str(path)).items():
            _check_type(str(path), key, value)
            merged[key] = base / value if key in _PATHS else value
    for key, value in (overrides or {}).items():
        if key not in _TYPES:
            raise InvalidParameterError("override", key, f"one of {', '.join(SETTING_KEYS)}")
        if value is None:
            continue
        given = str(value) if key in _PATHS else value
        _check_type("option", key, given)
        merged[key] = Path(given) if key in _PATHS else given

    if "db" in merged and "store" in merged:
        from ldp_aggregator.store_pg import redact

        raise InvalidParameterError(
            "store",
            redact(str(merged["store"])),
            "either db (an SQLite file) or store (a PostgreSQL URL), not both (file and options together)",
        )
    log_format = str(merged.pop("log_format", "text"))
    if log_format not in LOG_FORMATS:
        raise InvalidParameterError("log_format", log_format, " or ".join(LOG_FORMATS))
    log_level = str(merged.pop("log_level", "info")).lower()
    if log_level not in _LOG_LEVELS:
        raise InvalidParameterError("log_level", log_level, ", ".join(_LOG_LEVELS))
    limits = Limits(**{k: merged.pop(k) for k in list(merged) if k in _LIMIT_KEYS})
    # 0 means "off" in files and on the command line; ServerConfig uses None for off (0 = any free port).
    if merged.get("metrics_port") == 0:
        merged["metrics_port"] = None
    if merged.get("raw_retention_days") == 0:
        merged["raw_retention_days"] = None
    names = {f.name for f in dataclasses.fields(ServerConfig)}
    server = ServerConfig(limits=limits, **{k: v for k, v in merged.items() if k in names})
    return Settings(server=server, log_format=log_format, log_level=log_level)
