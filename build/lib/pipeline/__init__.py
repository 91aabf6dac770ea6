"""overtrain: checkpoint-sweep studies of how pre-training length changes what modifications do."""

__version__ = "0.1.0"
