"""Grain 0.2.18's own test files, run against aioloader with only their imports switched.

The promise is that a Grain pipeline gives the same records after changing only the
import. Each file here is read from the installed Grain wheel; its imports of the
modules `grain_shim` maps become aioloader's public names (a module of Grain's with no
counterpart here becomes an empty one); Grain's tree utilities and test markers stay
Grain's, and its test helper modules are rewritten the same way. pytest then runs the
file in a fresh process, and the tests that fail must be exactly those `KNOWN` lists,
each with the reason it fails. A test that starts failing is a regression; one that
starts passing should leave `KNOWN`.

Left out: `prefetch_test.py` (five minutes: its timing tests sleep), the interleave
tests (their base class is skipped by Grain), and Grain's own internals (stats,
autotuning, elastic iterators, processes).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.grain_shim import NAMES

# Grain's modules its tests may keep: tree utilities, test markers, protos, and the
# packing helper module that Grain's packing test helpers compute their expectations with.
KEPT = (
    "grain._src.core.tree_lib",
    "grain._src.core.pytest",
    "grain._src.core.config",
    "grain.proto",
    "grain._src.python.dataset.transformations.packing_packed_batch",
)
# Grain's test helpers, rewritten as the tests are and put beside them.
HELPERS = {"grain._src.python.dataset.transformations.testing_util": "testing_util"}

_PRIVATE = "uses Grain's private API (attributes, classes or flags aioloader has no counterpart of)"
_ORDER = (
    "Grain's workers each take every W-th record and batch their own: its batches change with "
    "worker_count; aioloader's never do (DESIGN.md, contract 1)"
)
_SHM = "Grain's shared memory between processes (aioloader's workers are threads)"

KNOWN: dict[str, dict[str, str]] = {}  # file -> {test id: why it fails here}


def _known(file: str, reason: str, *tests: str) -> None:
    KNOWN.setdefault(file, {}).update(dict.fromkeys(tests, reason))


_MP_ORDER = (
    "Grain's mp_prefetch workers each read a slice of the source, so its order changes with "
    "num_workers; aioloader's never does"
)
_WORDS = "the same exception type, other words (Grain's repr of its datasets in the message)"
for _group in (
    "object_reconstruction4",
    "object_reconstruction5",
    "same_object4",
    "same_object5",
    "same_object6",
):
    for _case in range(3):
        _known(
            "data_loader_test.py", _ORDER, f"DataLoaderTest_{_case}::test_data_loader_checkpointing_{_group}"
        )
for _case in range(3):
    _known(
        "data_loader_test.py",
        "a worker process's exit as Grain's RuntimeError: the workers are threads, and a SystemExit "
        "reaches the caller as it does at Grain's worker_count=0",
        f"DataLoaderTest_{_case}::test_reports_multiprocessing_worker_crash",
    )
_known(
    "data_loader_test.py",
    _SHM,
    *(
        f"CopyNumPyArrayToSharedMemoryTest::test_{name}"
        for name in (
            "copy_nested_numpy_array_to_shared_memory",
            "copy_numpy_array_to_shared_memory",
            "copy_skipped_dtype_hasobject",
            "copy_skipped_flags_c_contiguous",
            "copy_skipped_non_numpy_array",
        )
    ),
)
_known("data_loader_test.py", "Grain's per-worker state at 3 workers", "PyGrainDatasetIteratorTest::test_str")
_known("dataset/base_test.py", _PRIVATE, "IteratorContextTest::test_merge")
_known("dataset/base_test.py", _PRIVATE, "IteratorContextTest::test_merge_with_different_mp_context")
_known("dataset/dataset_test.py", _MP_ORDER, "DatasetTest::test_prefetch_with_slice_source")
_known(
    "dataset/dataset_test.py",
    _PRIVATE,
    "DatasetTest::test_mp_prefetch_switches_to_threads_for_free_threaded_python",
    "WithOptionsIterDatasetTest::test_conflicting_options",
    "WithOptionsIterDatasetTest::test_propagates_options_in_linear_pipeline",
    "WithOptionsIterDatasetTest::test_propagates_options_in_tree_pipeline",
    "GetExecutionSummaryTest::test_execution_summary_with_logging",
    "GetExecutionSummaryTest::test_get_execution_summary_without_collection",
)
_known(
    "dataset/transformations/batch_test.py",
    _PRIVATE + ": `_batch_fn`, `_MakeBatchParallel`, shared memory output, `DataLoader._dataset`",
    "BatchIterDatasetTest::test_batch_shared_memory_source_ds_jax",
    "BatchIterDatasetTest::test_batch_shared_memory_source_ds_no_jax",
    "BatchIterDatasetTest::test_batch_size_2_range_ds_jax",
    "BatchIterDatasetTest::test_batch_size_2_range_ds_no_jax",
    "BatchIterDatasetTest::test_batch_size_2_source_ds_jax",
    "BatchIterDatasetTest::test_batch_size_2_source_ds_no_jax",
    "BatchIterDatasetTest::test_batch_size_3_drop_remainder_jax",
    "BatchIterDatasetTest::test_batch_size_3_drop_remainder_no_jax",
    "BatchIterDatasetTest::test_batch_size_3_jax",
    "BatchIterDatasetTest::test_batch_size_3_no_jax",
    "BatchIterDatasetTest::test_batch_size_4_parallel_batch_range_ds_jax",
    "BatchIterDatasetTest::test_batch_size_4_parallel_batch_range_ds_no_jax",
    "BatchIterDatasetTest::test_batch_size_4_parallel_batch_source_ds_jax",
    "BatchIterDatasetTest::test_batch_size_4_parallel_batch_source_ds_no_jax",
    "BatchIterDatasetTest::test_dataloader_enables_shared_memory_on_batch_dataset",
    "BatchIterDatasetTest::test_element_spec_batch_3_shared_memory_output",
    "MakeBatchParallelTest::test_batch_parallel_shared_memory_disabled",
    "MakeBatchParallelTest::test_batch_parallel_shared_memory_enabled",
    "MakeBatchParallelTest::test_batch_parallel_shared_memory_object_dtype",
    "MakeBatchParallelTest::test_pickle_parallel_batch_preserves_flag",
    "MakeBatchTest::test_batch_different_shapes_parallel_batch_enabled_error",
    "MakeBatchTest::test_batch_different_structures_parallel_batch_enabled_error",
    "MakeBatchTest::test_batch_non_numpy_values",
    "MakeBatchTest::test_batch_single_value_parallel_batch_enabled_success",
    "MakeBatchTest::test_batch_two_values_parallel_batch_enabled_success",
    "StringTruncationTest::test_batch_iter_dataset_shm_preserves_variable_length_strings",
    "StringTruncationTest::test_parallel_batch_parallel_path_no_shm_preserves_strings",
    "StringTruncationTest::test_parallel_batch_parallel_path_shm_preserves_strings",
    "StringTruncationTest::test_parallel_batch_stack_shm_numpy_strings",
    "StringTruncationTest::test_parallel_batch_stack_shm_preserves_variable_length_strings",
)
_known(
    "dataset/transformations/filter_test.py",
    _PRIVATE,
    "FilterValidatorTest::test_raises",
    "FilterValidatorTest::test_validates",
    "FilterValidatorTest::test_warns",
)
_known(
    "dataset/transformations/map_test.py",
    _PRIVATE + ": `ds._element_spec`, `_reset_rng_state`",
    "RngPoolTest::test_reset_rng_state",
    "MapMapDatasetTest::test_map_element_spec_propagets_output_spec_error",
    *(
        f"{kind}{node}DatasetTest::test_{method}_element_spec_inference{suffix}"
        for kind, method in (
            ("Map", "map"),
            ("RandomMap", "random_map"),
            ("MapWithIndex", "map_with_index"),
        )
        for node in ("Map", "Iter")
        for suffix in ("", "_raises_error")
    ),
)
_known(
    "dataset/transformations/mix_test.py",
    _WORDS,
    "MixedMapDatasetTest::test_mixing_zero_length_dataset_fails_with_error",
)
_known(
    "dataset/transformations/mix_test.py",
    "Grain's repr of its mixed dataset",
    "MixedMapDatasetTest::test_repr",
)
_known(
    "dataset/transformations/mix_test.py",
    _PRIVATE,
    "ConcatenateLazyMapTest::test_cannot_concatenate_infinite_datasets",
    "ConcatenateLazyMapTest::test_concat_selection_map",
)
_known(
    "dataset/transformations/packing_concat_then_split_test.py",
    "the same ValueError, other words (Grain: `Parent element has structure ...`)",
    "ConcatThenSplitIterDatasetTest::test_additional_sequence_length",
    "ConcatThenSplitIterDatasetTest::test_missingsequence_length",
)
for _packer in ("FirstFit", "BestFit"):
    _known(
        "dataset/transformations/packing_test.py",
        _PRIVATE,
        f"{_packer}PackIterDatasetTest::test_get_packed_batch_size_bytes",
        f"{_packer}PackIterDatasetTest::test_get_packed_batch_size_bytes_before_next",
    )
    _known(
        "dataset/transformations/packing_test.py",
        "a nested feature that is not a meta feature is refused when the packer is made, "
        "where Grain fails at the first next()",
        f"{_packer}PackIterDatasetTest::test_nested_feature1",
    )
_known(
    "dataset/transformations/repeat_test.py",
    _PRIVATE,
    "RepeatIterDatasetTest::test_repeat_after_mp_prefetch_does_not_restart_workers",
)
_known(
    "dataset/transformations/shuffle_test.py",
    _PRIVATE,
    "WindowShuffleInterDatasetTest::test_checkpoint_restore_on_fresh_iterator",
)
_known(
    "dataset/transformations/slice_test.py",
    _PRIVATE,
    "SliceMapDatasetTest::test_getitem_with_slice_on_sliced_dataset",
    "SliceMapDatasetTest::test_init_raises_error_for_non_slice_object",
)
for _node in ("SourceMapDatasetTest", "RangeMapDatasetTest"):
    _known(
        "dataset/transformations/source_test.py",
        _PRIVATE + ": `set_slice`, the hook of Grain's process workers",
        f"{_node}::test_set_slice",
        f"{_node}::test_set_slice_raises_for_non_sequential_slice",
    )


FILES = [
    "samplers_test.py",
    "record_test.py",
    "load_test.py",
    "data_sources_test.py",
    "options_test.py",
    "operations_test.py",
    "data_loader_test.py",
    "dataset/base_test.py",
    "dataset/dataset_test.py",
    "dataset/sources/parquet_dataset_test.py",
    "dataset/transformations/batch_test.py",
    "dataset/transformations/filter_test.py",
    "dataset/transformations/flatmap_test.py",
    "dataset/transformations/limit_test.py",
    "dataset/transformations/map_test.py",
    "dataset/transformations/mix_test.py",
    "dataset/transformations/packing_concat_then_split_test.py",
    "dataset/transformations/packing_test.py",
    "dataset/transformations/rebatch_test.py",
    "dataset/transformations/repeat_test.py",
    "dataset/transformations/shuffle_test.py",
    "dataset/transformations/slice_test.py",
    "dataset/transformations/source_test.py",
    "dataset/transformations/zip_test.py",
]


def grain_tests() -> Path:
    """Where the Grain wheel keeps its test files, or a skip saying why it is not here."""
    spec = importlib.util.find_spec("grain")
    if spec is None or spec.origin is None:
        pytest.skip("Grain 0.2.18 is installed on the GIL build of CPython 3.11 only")
    return Path(spec.origin).parent / "_src" / "python"


_FROM = re.compile(r"^(\s*)from (grain[\w.]*) import (\w+)(?: as (\w+))?\s*$")
_IMPORT = re.compile(r"^(\s*)import (grain[\w.]*) as (\w+)\s*$")


def rewrite(text: str) -> str:
    """`text` with its imports of Grain's modules switched (see the module docstring)."""
    out = []
    for line in text.splitlines():
        found = _FROM.match(line)
        if found:
            indent, package, name, alias = found.groups()
            line = _switched(indent, package, name, alias or name)
        found = _IMPORT.match(line)
        if found:
            indent, path, alias = found.groups()
            line = _switched(indent, *path.rpartition(".")[::2], alias)
        out.append(line)
    return "\n".join(out) + "\n"


def _switched(indent: str, package: str, name: str, alias: str) -> str:
    shim = f"{indent}import tests.grain_shim as _grain_shim; {alias} = _grain_shim.module"
    path = f"{package}.{name}"
    if path in HELPERS:
        return f"{indent}import {HELPERS[path]} as {alias}"
    if path.startswith(KEPT) or package.startswith(KEPT):
        return f"{indent}from {package} import {name} as {alias}"
    if path in NAMES or not importlib.util.find_spec(package) or _is_module(path):
        return f"{shim}({path!r})"
    return f"{shim}({package!r}).{name}"


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except ImportError:
        return False


def run_grain_file(file: str, directory: Path) -> tuple[set[str], set[str]]:
    """Run Grain's test `file` rewritten in `directory`; its passed and failed test ids."""
    root = grain_tests()
    target = directory / Path(file).name
    target.write_text(rewrite((root / file).read_text()))
    for module, name in HELPERS.items():
        source = root / Path(*module.split(".")[3:]).with_suffix(".py")
        (directory / f"{name}.py").write_text(rewrite(source.read_text()))
    (directory / "conftest.py").write_text("from absl import flags\n\nflags.FLAGS.mark_as_parsed()\n")
    repository = Path(__file__).parent.parent
    path = os.pathsep.join([str(repository), str(directory)])
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", target.name]
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=600)
    results = re.findall(r"^(PASSED|FAILED|ERROR) \S+?::(\S+)", done.stdout, re.MULTILINE)
    passed = {test for outcome, test in results if outcome == "PASSED"}
    failed = {test for outcome, test in results if outcome != "PASSED"}
    assert passed or failed, done.stdout[-3000:] + done.stderr[-3000:]
    return passed, failed


@pytest.mark.parametrize("file", FILES)
def test_grains_own_tests_pass_but_the_known_ones(file: str, tmp_path: Path) -> None:
    passed, failed = run_grain_file(file, tmp_path)
    known = KNOWN.get(file, {})
    assert failed - set(known) == set(), "new failures (regressions)"
    assert set(known) - failed == set(), "these pass now: remove them from KNOWN"
    assert len(passed) > len(failed)
