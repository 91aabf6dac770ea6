"""overtrain: checkpoint-sweep studies of how pre-training length changes what modifications do."""

import sys as _sys

__version__ = "0.1.0"

_main = _sys.modules.get("__main__")
if hasattr(_main, "__real_file__") and type(getattr(_main, "snakemake", None)).__name__ == "Snakemake":
    # a rule script (Snakemake's `script:` preamble sets both). In a local run with a warm server,
    # a fork of that server runs the job and this process waits for it (pipeline/warm_start.py).
    # A Ctrl-C while it still imports torch and the like is one line too, as after its setup_logging
    # (pipeline/runtime.py)
    from pipeline.runtime import handle_rule_script_interrupts
    from pipeline.warm_start import hand_off

    hand_off(_main)

    for _log in _main.snakemake.log[:1]:
        handle_rule_script_interrupts(_log)
