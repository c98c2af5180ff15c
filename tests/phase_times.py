"""The time `make test` spent, read from its phases' JUnit reports: the slowest tests over all
phases (a test's setup, call and teardown together), then each phase's wall time, last, so that
the end of the run's output says where its time went.

Usage: python tests/phase_times.py REPORT.xml [REPORT.xml ...]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

SLOWEST = 20


def main(paths: list[str]) -> None:
    tests: list[tuple[float, str]] = []
    phases: list[str] = []
    for path in map(Path, paths):
        if not path.exists():
            phases.append(f"{path.stem}: did not run")
            continue
        root = ElementTree.parse(path).getroot()
        for suite in root.iter("testsuite"):
            phases.append(f"{path.stem}: {float(suite.get('time', 0)):.0f} s, {suite.get('tests')} tests, "
                          f"{suite.get('failures')} failed, {suite.get('errors')} errors, {suite.get('skipped')} skipped")
            tests += [(float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}")
                      for case in suite.iter("testcase")]
    print(f"slowest {SLOWEST} tests (seconds, setup + call + teardown):")
    for seconds, name in sorted(tests, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.1f}  {name}")
    print("\n".join(phases))


if __name__ == "__main__":
    main(sys.argv[1:])
