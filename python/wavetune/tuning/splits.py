"""The tune / held-out splits of generated problems: each layer (an (N, K) pair, or an expert layer)
belongs to one split by a hash, so the tune split (what tables are fitted to and design decisions may
look at) and the held-out split (looked at only for final reports) share no layer. Standard library only.
"""

from __future__ import annotations

import hashlib
import math
import random

HASHED_SPLITS = ("tune", "heldout")  # one pool, divided by a hash of each (N, K)


def split_of(n: int, k: int) -> str:
    digest = hashlib.sha256(f"{n}x{k}".encode()).digest()
    return HASHED_SPLITS[digest[0] % 2]


def token_count(rng: random.Random, m_max: int) -> int:
    """A token count log-uniform over 1..m_max (odd and unround values included, as a batcher makes them)."""
    return max(1, min(m_max, round(math.exp(rng.uniform(0.0, math.log(m_max))))))
