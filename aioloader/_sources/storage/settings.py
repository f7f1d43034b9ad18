"""How to reach an object store: `storage_options` (fsspec's names) over the AWS environment variables.

A source given `s3://` URLs resolves its settings once, when it is made:
each setting comes from `storage_options` if given there, else from the
standard environment variable, else from the default below. Without a key
pair the client library looks in its usual places (shared config files,
instance metadata), as the AWS tools do.

Credentials (the key pair and the session token) are kept out of the repr;
`secrets()` lists them so that error messages can be scrubbed of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

DEFAULT_REGION = "us-east-1"
DEFAULT_RETRIES = 4
DEFAULT_MAX_REQUESTS = 64
CLIENTS = ("auto", "obstore", "pyarrow", "s3fs")

# storage_options key -> the environment variables read when it is not given, in order.
_ENVIRONMENT = {
    "key": ("AWS_ACCESS_KEY_ID",),
    "secret": ("AWS_SECRET_ACCESS_KEY",),
    "token": ("AWS_SESSION_TOKEN",),
    "endpoint_url": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
}
_OPTIONS = (*_ENVIRONMENT, "anon", "retries", "max_requests", "client", "client_kwargs")


@dataclass(frozen=True)
class S3Settings:
    """Where the store is and who asks: one immutable value per source, shared by its threads.

    `endpoint_url` None means AWS itself. `retries` is how many times a
    request that failed transiently is sent again; `max_requests` how many
    requests a source has in flight at most. `client` names the library
    that talks to the store (`auto`: see `clients.make_client`).
    """

    endpoint_url: str | None = None
    region: str = DEFAULT_REGION
    key: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    anon: bool = False
    retries: int = DEFAULT_RETRIES
    max_requests: int = DEFAULT_MAX_REQUESTS
    client: str = "auto"

    def secrets(self) -> tuple[str, ...]:
        """The values that must never be shown: the secret key, the session token and the key id."""
        return tuple(value for value in (self.secret, self.token, self.key) if value)

    @property
    def where(self) -> str:
        """The endpoint, for messages."""
        return self.endpoint_url or "AWS S3"


def resolve(storage_options: Any, environ: Mapping[str, str] | None = None) -> S3Settings:
    """The settings from `storage_options` (a dict or None) and the environment, checked."""
    options = _require_options(storage_options)
    environ = os.environ if environ is None else environ
    client_kwargs = options.pop("client_kwargs", None) or {}
    if not isinstance(client_kwargs, Mapping):
        raise TypeError("`storage_options['client_kwargs']` must be a dict.")
    # s3fs passes the region and the endpoint to botocore through client_kwargs: accept them there too.
    for ours, theirs in (("region", "region_name"), ("endpoint_url", "endpoint_url")):
        if theirs in client_kwargs:
            options.setdefault(ours, client_kwargs[theirs])
    values = {name: options.get(name, _from_environment(name, environ)) for name in _ENVIRONMENT}
    anon = _require_bool("anon", options.get("anon", False))
    if anon:  # unsigned requests: no credentials, wherever they came from
        values |= {"key": None, "secret": None, "token": None}
    settings = S3Settings(
        endpoint_url=_require_endpoint(values["endpoint_url"]),
        region=_require_text("region", values["region"]) or DEFAULT_REGION,
        key=_require_text("key", values["key"], secret=True),
        secret=_require_text("secret", values["secret"], secret=True),
        token=_require_text("token", values["token"], secret=True),
        anon=anon,
        retries=_require_count("retries", options.get("retries", DEFAULT_RETRIES), 0, 20),
        max_requests=_require_count(
            "max_requests", options.get("max_requests", DEFAULT_MAX_REQUESTS), 1, 1024
        ),
        client=_require_client(options.get("client", "auto")),
    )
    if (settings.key is None) != (settings.secret is None):
        given, missing = ("key", "secret") if settings.key else ("secret", "key")
        raise ValueError(
            f"`storage_options` (or the AWS_* environment variables) give the access {given} "
            f"without the {missing}: give both, or neither."
        )
    return settings


def _require_options(storage_options: Any) -> dict[str, Any]:
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise TypeError(f"`storage_options` must be a dict or None, got {type(storage_options).__name__}.")
    unknown = sorted(str(name) for name in storage_options if name not in _OPTIONS)
    if unknown:  # names only: a value may be a secret
        raise ValueError(
            f"`storage_options` has unknown keys {unknown}; the known ones are {list(_OPTIONS)}."
        )
    return dict(storage_options)


def _from_environment(name: str, environ: Mapping[str, str]) -> str | None:
    for variable in _ENVIRONMENT[name]:
        if environ.get(variable):
            return environ[variable]
    return None


def _require_text(name: str, value: Any, *, secret: bool = False) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    shown = "" if secret else f" {value!r}"
    raise TypeError(f"`storage_options['{name}']` must be a str, got {type(value).__name__}{shown}.")


def _require_endpoint(value: Any) -> str | None:
    url = _require_text("endpoint_url", value)
    if url is None:
        return None
    parts = urlsplit(url)
    if "@" in parts.netloc:  # not echoed: it holds credentials
        raise ValueError("`storage_options['endpoint_url']` must not hold credentials (user:password@).")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(
            f"`storage_options['endpoint_url']` (or AWS_ENDPOINT_URL) must be http(s)://host[:port], "
            f"got {url!r}."
        )
    return url.rstrip("/")


def _require_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"`storage_options['{name}']` must be True or False, got {value!r}.")
    return value


def _require_count(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"`storage_options['{name}']` must be an int from {low} to {high}, got {value!r}.")
    return value


def _require_client(value: Any) -> str:
    if value not in CLIENTS:
        raise ValueError(f"`storage_options['client']` must be one of {CLIENTS}, got {value!r}.")
    return str(value)
