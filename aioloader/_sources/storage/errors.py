"""What a failed request means, and the error the user sees for it.

Each client library reports failures its own way; its adapter sorts them
into four kinds. Only `TRANSIENT` ones (the server or the network did not
answer, a 5xx, throttling) are worth sending again; the others fail at
once. The user gets a built-in exception type (FileNotFoundError,
PermissionError, ConnectionError, OSError) whose message names the URL
and the endpoint, and carries the library's own words with every secret
replaced: the library's exception is not chained, since its arguments may
hold what the message leaves out.
"""

from __future__ import annotations

import enum
import errno
import re
from collections.abc import Iterable

_DETAIL_LIMIT = 300
# obstore appends a multi-line debug dump to its messages; the first part says it all.
_DEBUG_DUMP = re.compile(r"\n\s*\n?Debug source:.*", re.DOTALL)


class Kind(enum.Enum):
    NOT_FOUND = "not found"
    DENIED = "denied"
    TRANSIENT = "transient"
    OTHER = "other"


_TRANSIENT_WORDS = re.compile(
    r"NETWORK_CONNECTION|curlCode|error sending request|"
    r"(?i:connection (?:was )?(?:refused|reset|closed|aborted))|"
    r"timed? ?out|Server ?disconnected|Could not connect|Connection\w*Error|ConnectTimeout|ReadTimeout|"
    r"ClientOSError|SLOW_DOWN|SlowDown|THROTTL|Throttl|SERVICE_UNAVAILABLE|"
    r"ServiceUnavailable|INTERNAL_FAILURE|InternalError|(?i:internal error)|RequestTimeout|REQUEST_TIMEOUT|"
    r"(?:status code:|response code:|HTTP status) 5\d\d|\b50[0-4] ",
)
# s3fs says a 503 or SlowDown with EBUSY.
_TRANSIENT_ERRNOS = {errno.EBUSY, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED}
_DENIED_WORDS = re.compile(
    r"ACCESS_DENIED|AccessDenied|INVALID_ACCESS_KEY|InvalidAccessKeyId|SIGNATURE_DOES_NOT_MATCH|"
    r"SignatureDoesNotMatch|403 Forbidden|response code: 403|UNAUTHENTICATED|ExpiredToken"
)
_NOT_FOUND_WORDS = re.compile(
    r"NO_SUCH_BUCKET|NoSuchBucket|NO_SUCH_KEY|NoSuchKey|RESOURCE_NOT_FOUND|404 Not Found"
)


def classify_message(error: BaseException) -> Kind:
    """The kind of `error` from its type and words, for libraries that say it only in words."""
    if isinstance(error, FileNotFoundError):
        return Kind.NOT_FOUND
    if isinstance(error, PermissionError):
        return Kind.DENIED
    if isinstance(error, ConnectionError | TimeoutError):
        return Kind.TRANSIENT
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return Kind.TRANSIENT
    text = f"{type(error).__name__}: {_DEBUG_DUMP.sub('', str(error))}"
    for kind, words in ((Kind.DENIED, _DENIED_WORDS), (Kind.NOT_FOUND, _NOT_FOUND_WORDS)):
        if words.search(text):
            return kind
    return Kind.TRANSIENT if _TRANSIENT_WORDS.search(text) else Kind.OTHER


def detail(error: BaseException, secrets: Iterable[str]) -> str:
    """The library's message in short, with every secret replaced by `<hidden>`."""
    text = _DEBUG_DUMP.sub("", str(error)).strip() or type(error).__name__
    for secret in secrets:
        text = text.replace(secret, "<hidden>")
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


def storage_error(kind: Kind, url: str, where: str, error: BaseException, secrets: Iterable[str]) -> OSError:
    """The exception the user sees for a request on `url` that failed with `error`."""
    said = detail(error, secrets)
    if kind is Kind.NOT_FOUND:
        return FileNotFoundError(f"`{url}` does not exist at {where} ({said}).")
    if kind is Kind.DENIED:
        return PermissionError(f"`{url}`: access denied by {where}; check the credentials ({said}).")
    return OSError(f"`{url}`: the request to {where} failed ({said}).")


def unavailable(url: str, where: str, attempts: int, error: BaseException, secrets: Iterable[str]) -> OSError:
    """The exception for a request on `url` that failed transiently `attempts` times in a row."""
    return ConnectionError(
        f"`{url}`: {where} did not answer after {attempts} attempt{'s' * (attempts > 1)} "
        f"({detail(error, secrets)})."
    )
