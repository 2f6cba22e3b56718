"""Decisions where memory's failures alone asked for an opening (directed exploration's condition
before dc6120f) and the episode had also refuted one of those uses: whether the rule offered there.
At dc6120f the bound could withhold the offer in that case; 84b1408 offers as before.

    python regress.py HOME [HOME ...]      # each HOME's newest evaluation
"""

import collections
import sys

from bound import memory_alone_asks, put_decisions

for home in sys.argv[1:]:
    counts: collections.Counter = collections.Counter()
    for post, _obj, group, _closed in put_decisions(home):
        if memory_alone_asks(post, group) and set(post.get("punished", [])) & set(group):
            counts["offered" if post.get("explored") else "not offered"] += 1
    print(home, dict(counts))
