"""`BankError`: the one exception base of the experience bank, so callers catch one type.

Every error the bank raises for something a user can fix derives from it (and also from the
builtin it always was, `LookupError`, `ValueError` or `RuntimeError`, so older handlers still
work); each message names the cause and the fix.
"""


class BankError(Exception):
    """Something the experience bank could not do; the message says why and what to do."""
