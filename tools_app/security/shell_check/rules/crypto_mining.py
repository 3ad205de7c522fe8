"""Rule group `crypto_mining`: Known miners, stratum pool URLs and mining pool hosts.
"""
from __future__ import annotations

import re

from ..vocabulary import MINERS
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "crypto_mining",
    "Known miners, stratum pool URLs and mining pool hosts.",
)


def crypto_miner(analysis, c):
    j = " ".join(c.argv).lower() + " " + (c.icode or "")
    if c.name.lower() in MINERS or re.search(r"stratum\d?\+(tcp|ssl|tls)://|--donate-level|-a\s+(cryptonight|randomx|rx/0)|minexmr|nanopool\.org|supportxmr|moneroocean|hashvault|2miners|f2pool|nicehash", j):
        return [("crypto miner", True)]
    return []


RULES = (
    Rule(
        "crypto_miner",
        GROUP.name,
        "Known miners, stratum URLs and mining pools.",
        crypto_miner,
    ),
)
