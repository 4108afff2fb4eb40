"""The failed tests of CI's passes, each with the lines that say how it failed, from the passes'
JUnit XML: printed at the end of `.ci/run`, where a cut log still shows them."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

LINES = 12  # of each failure: its message, then the end of its traceback


def main(paths: list[str]) -> None:
    failed = []
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            for outcome in ("failure", "error"):
                found = case.find(outcome)
                if found is not None:
                    failed.append((Path(path).stem, case, outcome, found))
    if not failed:
        return
    print(f"== failures ({len(failed)})")
    for run, case, outcome, found in failed:
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        print(f"-- {run}: {outcome} {name} ({case.get('time')} s)")
        message = (found.get("message") or "").strip().splitlines()[:3]
        tail = [line for line in (found.text or "").rstrip().splitlines() if line.strip()]
        for line in [*message, "...", *tail[-(LINES - len(message)) :]]:
            print(f"   {line[:200]}")


if __name__ == "__main__":
    main(sys.argv[1:])
