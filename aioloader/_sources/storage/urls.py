"""Object-store URLs (`s3://bucket/key`) and the globs the sources accept in them."""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEME = "s3://"
_GLOB_CHARS = re.compile(r"[*?\[]")
_OTHER_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True, order=True)
class ObjectUrl:
    """One object: its bucket and key. `str()` gives the `s3://` URL back."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"


def is_url(path: str) -> bool:
    """Whether `path` names an object in a store rather than a local file."""
    return path.startswith(SCHEME)


def check_scheme(path: str, name: str) -> None:
    """Reject, naming the argument, a URL of a scheme aioloader does not read (`gs://`, `http://`)."""
    if not is_url(path) and _OTHER_SCHEME.match(path):
        scheme = path.split("://", 1)[0]
        raise ValueError(
            f"`{name}` uses the scheme '{scheme}://', which aioloader does not read: "
            f"give a local path or an s3:// URL, got {path!r}."
        )


def parse(url: str, name: str = "paths") -> ObjectUrl:
    """The bucket and key of an `s3://bucket/key` URL; ValueError naming `name` if it has neither."""
    bucket, _, key = url[len(SCHEME) :].partition("/")
    if not bucket or not key or _GLOB_CHARS.search(bucket):
        raise ValueError(f"`{name}` must be an s3://bucket/key URL, got {url!r}.")
    return ObjectUrl(bucket, key)


def is_glob(url: str) -> bool:
    """Whether the key of `url` holds a wildcard (`*`, `**`, `?` or `[...]`)."""
    return bool(_GLOB_CHARS.search(url))


def glob_prefix(pattern: ObjectUrl) -> str:
    """The folder to list for `pattern`: its key up to the last `/` before the first wildcard."""
    literal = _GLOB_CHARS.split(pattern.key, maxsplit=1)[0]
    return literal[: literal.rfind("/") + 1]


def glob_matcher(pattern: str) -> re.Pattern[str]:
    """A regex for a key pattern: `*` and `?` stay within a folder, `**` crosses folders, `[...]` is a set."""
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):  # any number of folders, none included
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            parts.append(_char_set(pattern[i + 1 : end]))
            i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def _char_set(body: str) -> str:
    """A regex class for the glob set `[body]` (`[!...]` negates; ranges such as `0-9` stay ranges)."""
    negate = body.startswith("!")
    chars = body[negate:].replace("\\", "\\\\").replace("^", "\\^")
    return f"[{'^' if negate else ''}{chars}]"
