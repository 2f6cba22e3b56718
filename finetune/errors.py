"""`FinetuneError`: the one exception base of fine-tuning, so callers catch one type."""


class FinetuneError(Exception):
    """A dataset, training round or adapter operation failed; the message says why and what to do."""
