"""What the file sources share about the object store they may hold: statistics, close, `with`."""

from __future__ import annotations

from typing import Self

from aioloader._sources.storage.store import ObjectStore, StorageStatistics, statistics_of


class StoreOwner:
    """A source that may hold an `ObjectStore` (`_store`, None for local files only).

    `close()` releases the source's own files and caches (`_release`), then
    the store's threads; it is idempotent, and a source is a context manager
    that closes itself.
    """

    _store: ObjectStore | None = None

    paths: tuple[str, ...] = ()

    def state_identity(self) -> str:
        """What a state records of it: a digest of the files' names, not of their folders
        (a dataset moved to another mount, or copied to object storage, still resumes)."""
        from aioloader._sources.protocols import digest

        return digest("\n".join(str(path).rstrip("/").rsplit("/", 1)[-1] for path in self.paths))

    def storage_statistics(self) -> StorageStatistics:
        """Requests to the object store so far (all zero for local files)."""
        return statistics_of(self._store)

    def close(self) -> None:
        """Close the files and the object store's connections (idempotent); reading afterwards raises."""
        self._release()
        if self._store is not None:
            self._store.close()

    def _release(self) -> None:
        """Close the source's own files and drop its caches."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
