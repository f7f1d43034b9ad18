"""What the tests share, one module per kind of thing.

* `reference`: the pipelines the contract tests run, and an independent
  evaluator of what they must output;
* `outputs`: taking a loader's outputs (every output, the error after them,
  the states along the way);
* `transforms`: module-level transforms and sources (some that fail on
  purpose) that subinterpreters load by reference;
* `tracked`: records that count how many of them are alive, for the memory
  bound;
* `needs_pyarrow`: a transform whose module refuses subinterpreters;
* `arrayrecord_files`, `multiprocess_worker`, `train_job`: programs that the
  tests run in a process of their own.
"""
