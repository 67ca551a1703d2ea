"""docs/benchmarks.md's figures for ``rose run`` hold for the readings rose-sql computes today.

``bench/bench_run.py`` prints the readings its ``rose run`` computed ("readings measured": every name of a
record's ``readings``); the page states that set beside the figures. A reading added since is not in the
figures: this test fails until the bench is run again and the page carries its new figures and set.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from rose_sql.readings.formulas import Readings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def test_the_bench_figures_were_measured_with_every_reading_rose_computes() -> None:
    stated = re.search(r"^Readings measured: (.+)$", PAGE.read_text(encoding="utf-8"), re.M)
    assert stated is not None, f"{PAGE.name} states no 'Readings measured:' line beside the rose run figures"
    measured = set(re.findall(r"`(\w+)`", stated.group(1)))
    computed = {f.name for f in fields(Readings)}
    assert measured == computed, (
        f"{PAGE.name}'s rose run figures were measured with {sorted(measured)}; rose-sql now computes "
        f"{sorted(computed)}: run bench/bench_run.py again and update the page"
    )
