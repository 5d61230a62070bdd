"""The order in which the suite hands its test files to xdist's workers: longest first.

CI runs `pytest -n 2 --dist loadfile`: each file goes whole to one worker, the next file to
whichever worker runs short of work first, and the run lasts as long as the busier worker. Given
in collection order (alphabetical), the end-to-end files (test_seed_blocks_cluster, test_sweep,
test_tables_only...) come last, and one of them can still be running on a worker long after the
other worker has emptied the queue. Handed out longest first, the last files given out are the
short ones, and both workers end within a few seconds of each other. xdist's own reordering (by
number of tests per file, the opposite of what matters here) is switched off in pyproject.toml
(`--no-loadscope-reorder`).

FILE_SECONDS.json holds each file's seconds (setup, call and teardown of its tests summed) from a
full run; a file it does not list goes first, since a new file may be a slow one. Regenerate it
from a full run's JUnit report after the suite's costs change:

    python -m pytest -q -n 2 --dist loadfile --junitxml=report.xml
    python tests/file_order.py report.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SECONDS_FILE = Path(__file__).with_name("FILE_SECONDS.json")


def file_seconds() -> dict[str, float]:
    """{test file path relative to the repository: seconds of its tests in the last recorded run}."""
    return json.loads(SECONDS_FILE.read_text()) if SECONDS_FILE.is_file() else {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """The items regrouped by file, files unknown to `seconds` first, then by seconds, longest
    first; the order inside a file, and among files of equal cost, is kept."""
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    rank = {f: (f in seconds, -seconds.get(f, 0.0), i) for i, f in enumerate(files)}
    return sorted(items, key=lambda item: rank[item.nodeid.split("::")[0]])


def seconds_from_junit(report: Path) -> dict[str, float]:
    """Per test file, its tests' summed times in a JUnit report (pytest's `--junitxml`, whose
    classname is the dotted module path, followed by the class for a test in a class)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next(i for i, p in enumerate(parts) if p.startswith("test_"))
        seconds["/".join(parts[: module + 1]) + ".py"] += float(case.get("time", 0))
    return {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda fs: -fs[1])}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/file_order.py REPORT.xml (a full run's pytest --junitxml report)")
    SECONDS_FILE.write_text(json.dumps(seconds_from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {SECONDS_FILE}")
