"""Bytes from local files and object stores, behind one small interface for the format readers.

`urls` (s3:// URLs, globs) -> `settings` (storage_options over AWS_*) ->
`clients` (obstore, pyarrow, s3fs; one chosen per build) -> `errors` (what
a failure means, and what the user sees) -> `store` (concurrent, merged,
retried range requests) -> `blobs` (what the readers call: open a path or
URL, size, read ranges, many at once).
"""
