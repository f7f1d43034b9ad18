"""A transform's copy for a worker (`_operations/copying`): exactly `copy.deepcopy`'s result,
its large flat containers copied in C (new containers holding the same scalar objects)."""

from __future__ import annotations

import collections
import copy
from typing import Any

import aioloader
from aioloader._operations.copying import FLAT_MIN, deep_copy
from aioloader._operations.transforms import compile_operations

N = FLAT_MIN * 4


class Tables:
    def __init__(self) -> None:
        self.vocabulary = {f"word{i}": i for i in range(N)}
        self.floats = [i / 7 for i in range(N)]
        self.stop_words = {f"stop{i}" for i in range(N)}
        self.pairs = tuple(range(N))


class Tokenize(aioloader.MapTransform):
    def __init__(self, tables: Tables) -> None:
        self.tables = tables  # one level down
        self.by_name = {"merges": [bytes([i % 256]) * 2 for i in range(N)]}  # in a small dict
        self.nested = {f"k{i}": [i] for i in range(N)}  # not flat: each value a list
        self.ordered = collections.OrderedDict((i, i) for i in range(N))  # a subclass: deepcopy's

    def map(self, element: Any) -> Any:
        return self.tables.vocabulary.get(element, -1)


def containers(transform: Tokenize) -> list[Any]:
    tables = transform.tables
    return [
        tables.vocabulary,
        tables.floats,
        tables.stop_words,
        transform.by_name["merges"],
        transform.nested,
        transform.ordered,
    ]


def test_the_copy_is_deepcopys_with_new_containers_of_the_same_scalars() -> None:
    original = Tokenize(Tables())
    copied = deep_copy(original, {})
    expected = copy.deepcopy(original)
    pairs = zip(containers(copied), containers(expected), containers(original), strict=True)
    for mine, theirs, source in pairs:
        assert type(mine) is type(theirs) is type(source)
        assert mine == theirs == source
        assert mine is not source  # a container of its own, as deepcopy's
        items = mine.items() if isinstance(mine, dict) else mine
        for item in list(items)[:3]:
            assert item in (source.items() if isinstance(source, dict) else source)
    assert copied.tables.pairs is original.tables.pairs  # deepcopy gives such a tuple back too
    assert copied.tables.pairs is expected.tables.pairs
    # The scalars are the very objects (as deepcopy's), the non-flat dict's lists are new.
    assert next(iter(copied.tables.vocabulary)) is next(iter(original.tables.vocabulary))
    assert copied.nested["k0"] == [0]
    assert copied.nested["k0"] is not original.nested["k0"]
    copied.tables.vocabulary["new"] = 1
    assert "new" not in original.tables.vocabulary


def test_a_container_two_operations_share_stays_shared_in_their_copies() -> None:
    tables = Tables()
    operations = compile_operations([Tokenize(tables), Tokenize(tables)])
    first, second = (op.target for op in operations.for_worker().before)
    assert first.tables.vocabulary is second.tables.vocabulary
    assert first.tables.vocabulary is not tables.vocabulary
    assert first.tables.vocabulary == tables.vocabulary


class SharesItsTables(Tokenize):
    def __deepcopy__(self, memo: dict[int, Any]) -> SharesItsTables:
        clone = copy.copy(self)
        clone.nested = copy.deepcopy(self.nested, memo)
        return clone  # the tables, the vocabulary included, shared on purpose


def test_a_transforms_own_deepcopy_still_decides() -> None:
    original = SharesItsTables(Tables())
    copied = deep_copy(original, {})
    assert copied is not original
    assert copied.tables is original.tables
    assert copied.tables.vocabulary is original.tables.vocabulary
    assert copied.nested == original.nested
    assert copied.nested is not original.nested


def test_containers_of_other_things_are_left_to_deepcopy() -> None:
    class Key(str):
        pass

    holder = Tokenize(Tables())
    holder.tables.vocabulary[Key("subclassed")] = 0  # no longer flat: deepcopy copies the key
    holder.tables.floats.append([1.0])  # nor this list
    copied = deep_copy(holder, {})
    key = next(k for k in copied.tables.vocabulary if type(k) is Key)
    assert key == "subclassed"
    assert copied.tables.floats[-1] == [1.0]
    assert copied.tables.floats[-1] is not holder.tables.floats[-1]


def test_a_loader_with_workers_gives_the_batches_of_worker_count_0() -> None:
    source = [f"word{i % (N + 10)}" for i in range(4 * N)]
    sampler = aioloader.IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)

    def batches(workers: int) -> list[list[int]]:
        loader = aioloader.DataLoader(
            data_source=source,
            sampler=sampler,
            operations=[Tokenize(Tables()), aioloader.Batch(64, batch_fn=list)],
            worker_count=workers,
        )
        with iter(loader) as iterator:
            return list(iterator)

    reference = batches(0)
    assert batches(2) == reference
    unknown = sum(1 for word in source if int(word[4:]) >= N)
    assert [x for batch in reference for x in batch].count(-1) == unknown > 0


class Guarded:
    """Refuses every attribute, `__dict__` included, as a proxy of a closed resource does."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"closed: {name}")


class HoldsAGuard(aioloader.MapTransform):
    def __init__(self) -> None:
        self.guard = Guarded()
        self.vocabulary = {f"word{i}": i for i in range(N)}

    def map(self, element: Any) -> Any:
        return element

    def __deepcopy__(self, memo: dict[int, Any]) -> HoldsAGuard:
        clone = copy.copy(self)
        clone.vocabulary = copy.deepcopy(self.vocabulary, memo)
        return clone  # the guard shared


def test_an_attribute_that_refuses_to_be_looked_at_is_left_to_deepcopy() -> None:
    original = HoldsAGuard()
    copied = deep_copy(original, {})
    assert copied.vocabulary == original.vocabulary
    assert copied.vocabulary is not original.vocabulary
    assert object.__getattribute__(copied, "guard") is object.__getattribute__(original, "guard")


class Tripwire:
    """Counts the looks at its attributes."""

    looks = 0

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        Tripwire.looks += 1
        return {}


class Shared(aioloader.MapTransform):
    """One object for every worker (its `__deepcopy__`), holding what the workers change."""

    def __init__(self) -> None:
        self.state = Tripwire()

    def map(self, element: Any) -> Any:
        return element

    def __deepcopy__(self, memo: dict[int, Any]) -> Shared:
        return self


def test_what_a_transforms_own_deepcopy_shares_is_not_walked() -> None:
    # A worker copying the operations while other threads changed a dict such a transform
    # shares failed with "dictionary changed size during iteration" (the LateEarly transform
    # of tests/support/reference.py, on 3.13t): `deepcopy` never walks what it shares.
    holder = Tokenize(Tables())
    holder.shared = Shared()  # type: ignore[attr-defined]
    Tripwire.looks = 0
    copied = deep_copy(holder, {})
    assert Tripwire.looks == 0
    assert copied.shared is holder.shared  # type: ignore[attr-defined]
    assert copied.tables.vocabulary == holder.tables.vocabulary
    assert copied.tables.vocabulary is not holder.tables.vocabulary
