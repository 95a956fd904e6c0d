"""mypy for pipetab: pipetab.schedules and pipetab.hardware must be clean; no file of the
whole package may have more errors than its line in .ci/mypy-baseline.txt.

    python .ci/typecheck.py            # check (exit 1 on new errors)
    python .ci/typecheck.py --update   # lower the baseline to the counts now (never raises it)

The top-level folders install as pipetab.schedules, .hardware, .solver (package-dir in
pyproject.toml), so mypy cannot find them in the source tree: it reads a tree of symlinks,
build/typecheck/pipetab/, that puts them where the installed package has them. The
baseline names files by their path in the repository, one "path count" line each, sorted.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
MAPPED = ("schedules", "hardware", "solver")  # pipetab/<name>/... is <name>/... in the repository
CLEAN = ("pipetab.schedules", "pipetab.hardware")


def build_tree() -> None:
    package = TREE / "pipetab"
    if package.exists():
        shutil.rmtree(package)  # removes the links, never what they point to
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "pipetab").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(Path("../../../pipetab") / entry.name)
    for name in MAPPED:
        (package / name).symlink_to(Path("../../..") / name)


def mypy(*packages: str) -> collections.Counter[str]:
    """Errors per repository path of ``mypy -p PACKAGE ...`` (its output is echoed on failure)."""
    args = [arg for p in packages for arg in ("-p", p)]
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                          cwd=TREE, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"typecheck: mypy failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    counts: collections.Counter[str] = collections.Counter()
    for line in proc.stdout.splitlines():
        m = re.match(r"(\S+?\.pyi?)(?::\d+)*: error:", line)
        if m:
            path = m.group(1)
            parts = path.split("/")
            counts["/".join(parts[1:]) if len(parts) > 2 and parts[1] in MAPPED else path] += 1
    return counts


def read_baseline() -> dict[str, int]:
    lines = BASELINE.read_text().splitlines() if BASELINE.exists() else []
    return {path: int(n) for path, n in (line.split() for line in lines if line.strip())}


def main(argv: list[str]) -> int:
    build_tree()
    clean = mypy(*CLEAN)
    for path, n in sorted(clean.items()):
        print(f"{path}: {n} mypy errors ({', '.join(CLEAN)} must have none)")
    counts, baseline = mypy("pipetab"), read_baseline()
    if "--update" in argv:  # the first baseline is what there is; later ones only go down
        new = {p: min(counts[p], n) for p, n in baseline.items()} if BASELINE.exists() else counts
        baseline = {p: n for p, n in new.items() if n}
        BASELINE.write_text("".join(f"{p} {n}\n" for p, n in sorted(baseline.items())))
        print(f"typecheck: wrote {BASELINE.relative_to(ROOT)} ({sum(baseline.values())} errors)")
    worse = sorted(p for p in counts if counts[p] > baseline.get(p, 0))
    for path in worse:
        print(f"{path}: {counts[path]} mypy errors, baseline {baseline.get(path, 0)}")
    if clean or worse:
        print(f"typecheck: failed (mypy -p pipetab: {sum(counts.values())} errors; run it in {TREE} to see them)")
        return 1
    better = sorted(p for p in baseline if counts[p] < baseline[p])
    if better:
        for path in better:
            print(f"note: {path}: {counts[path]} mypy errors, baseline {baseline[path]}")
        print("note: fewer errors than the baseline: lower it (python .ci/typecheck.py --update)")
    print(f"typecheck: ok ({', '.join(CLEAN)} clean; pipetab: {sum(counts.values())} errors, "
          f"baseline {sum(baseline.values())})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
