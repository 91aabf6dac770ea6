"""Python functions of the local task YAMLs (lm-eval loads this file by its path)."""

from __future__ import annotations

from lm_eval.tasks.hellaswag import utils as _hellaswag

_PROCESSED: dict[str, object] = {}


def hellaswag_process_docs(docs):
    """lm-eval's hellaswag `process_docs` for a `datasets.Dataset` of raw HellaSwag rows (the
    evaluated split), memoized on the dataset's fingerprint: lm-eval re-runs `process_docs` on every
    access to a task's documents (dozens per evaluation), which `datasets` caches on disk for hub
    datasets but not for our in-memory ones.

    The few-shot pool is a list of OLMES train docs that OLMES already preprocessed (query,
    choices, gold, label: the fields this function adds); it passes through unchanged.
    """
    if isinstance(docs, list):
        return docs
    key = getattr(docs, "_fingerprint", None)
    if key is None:
        return _hellaswag.process_docs(docs)
    if key not in _PROCESSED:
        if len(_PROCESSED) >= 4:
            _PROCESSED.pop(next(iter(_PROCESSED)))
        _PROCESSED[key] = _hellaswag.process_docs(docs)
    return _PROCESSED[key]
