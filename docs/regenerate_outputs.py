"""Regenerate the outputs pasted in README.md and docs/*.md from this tree, or check them.

A pasted output is a fenced block marked on the line before its fence:

    <!-- output: main-job; cpu AuthenticAMD avx512 -->
    ```
    $ tune-gems sweep sweeps/smoke.yaml --name smoke
    ...
    ```

`BLOCKS` says, per name, the commands the block shows (and set-up commands it does not), and
how each one's output is trimmed as the prose says it is: the lines kept (a pattern, or a pattern
and how many of its lines), `...` where kept lines have lines left out between them, lines
dropped silently where the prose says so ("the HEALTH_DIAG lines left out"), edits that shorten
a line. Every command runs in one scratch folder (`--work`, default a new temporary one) that
sees the repository's `sweeps/` and `examples/`; a file a block needs is taken from the document
itself (`<!-- input: arms_demo.yaml -->` before the fenced block that shows it); the paths of the
scratch folder and of the repository are printed relative, as a user in a fresh clone sees them.
The marker records the CPU the block was made on (`cpu_code_path`): MKL's `MKL_CBWR` branch pins
Intel CPUs only, so a sweep's bits on an AMD CPU differ from an Intel one's.

    python docs/regenerate_outputs.py                  # every block, rewritten in place
    python docs/regenerate_outputs.py main-job main-confirm --check   # compare, write nothing

Each fresh block is also written to `<work>/fresh/<name>.txt`.
`--check` (and tests/test_doc_outputs.py) compares every number of a pasted block with the fresh
output's, except wall-clock figures (elapsed, ETA, sps, durations, a plan's design times), the
CPU thread count and trial ids; lines whose order is the scheduler's (which of two concurrent trials finished first)
are compared as a set.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
LINKED = ("sweeps", "examples")
"""Repository folders the commands read through relative paths, linked into the scratch folder."""
OUTPUT = re.compile(r"^<!-- output: ([\w-]+)(?:; cpu ([^>]*?))? -->\n(```[^\n]*\n)(.*?)^```$", re.M | re.S)
INPUT = re.compile(r"^<!-- input: ([\w.-]+) -->\n```[^\n]*\n(.*?)^```$", re.M | re.S)
ELIDED = "..."
TIMEOUT_S = 3600


@dataclass(frozen=True)
class Step:
    """One command of a block: `shown` as the block shows it after `$ ` (a `\\` line break and
    ` && ` as a shell has them); `keep`: the output lines pasted, each a pattern or (pattern,
    how many of its lines), None for every line; `drop`: lines left out without `...`; `edits`:
    (pattern, replacement) applied to every pasted line; `stderr`: paste the error stream (a
    refusal's line) instead of stdout; `show`: False for a set-up command, run and not shown."""

    shown: str
    keep: tuple | None = None
    drop: tuple[str, ...] = ()
    edits: tuple[tuple[str, str], ...] = ()
    stderr: bool = False
    show: bool = True


@dataclass(frozen=True)
class Block:
    name: str
    steps: tuple[Step, ...]
    needs: tuple[str, ...] = ()
    """Blocks whose commands must have run first (in the same scratch folder)."""
    unordered: tuple[str, ...] = ()
    """Patterns of lines whose order is the scheduler's: compared as a set."""


SWEEP_TABLE = (r"^trial_id ", r"^[0-9a-f]{8} +(TERMINATED|ERROR|UNFINISHED) ", r"^note: ", r"^results: ")
GEM_TABLE = (r"^gem  verdict ", r"^---  ", r"^g\d+ {2,}")
DECIDED = r"^ +the test that decided the word: "
FINISHED = r"^tune-gems sweep: trial \d+/\d+ finished: "

BLOCKS = (
    Block("main-job", (
        Step("tune-gems sweep sweeps/smoke.yaml --name smoke",
             keep=(r"^tune-gems sweep: (data|split): ", (r"HEALTH_DIAG epoch=3 .* arms=4$", 1), FINISHED, *SWEEP_TABLE)),
        Step("tune-gems analyze experiments/smoke"),
    ), unordered=(FINISHED,)),
    Block("main-confirm", (Step("tune-gems confirm experiments/smoke", drop=(r"^HEALTH_DIAG ",)),), needs=("main-job",)),
    Block("calibrate", (
        Step("tune-gems analyze --calibrate experiments/smoke --n-sim 1000",
             keep=((r"^Calibration of ", 1), r"^shape: ", (r"^seeds  ", 1), r"^(experiment \(\S+\)|\d+) +(normal|t3) ",
                   r"^family-wise false rate",
                   (r"^8 +3 +0\.5 ", 1), r"^worst false rate ")),
    ), needs=("main-job",)),
    Block("arms-demo", (
        Step("tune-gems train arms_demo.yaml --out runs/arms-demo",
             edits=((r"^(HEALTH_DIAG epoch=[12] .*) arms \[.*\]$", r"\1 arms [...]"),)),
    )),
    Block("folds-demo", (
        Step('tune-gems train data.folds.k=3 "data.synthetic.edge_periods=[[0,0.8],[0.6,0]]" data.synthetic.n=3000 \\\n'
             "    trainer.population=4 trainer.epochs=3 trainer.iterations_per_epoch=100 model.hidden=64 --out runs/folds-demo"),
        Step("cat runs/folds-demo/folds.csv"),
    )),
    Block("walk-forward", (
        Step("tune-gems sweep sweeps/walk_forward.yaml --name wf && tune-gems analyze experiments/wf",
             keep=(r"^tune-gems sweep: (data|split): ", FINISHED, *GEM_TABLE, r"^g6: ", (r"^    why: ", 1))),
    )),
    Block("shared-path", (
        Step("tune-gems sweep sweeps/smoke.yaml --name shared config.data.synthetic.paths=shared && tune-gems analyze experiments/shared",
             keep=(*GEM_TABLE, r"^g6: ", (r"^    why: ", 1))),
    )),
    Block("plan", (
        Step("tune-gems sweep sweeps/walk_forward.yaml --name wf2 config.trainer.epochs=4 config.trainer.iterations_per_epoch=60 "
             "config.trainer.population=8", show=False),
        Step("tune-gems plan experiments/wf2 --target-mde 0.3",
             keep=(r"^Plan from ", r"^variance parts ", r"^  g\d+: ", r"^cost: ", r"^designs that reach ", r"^  periods ",
                   (r"^  \d+ +\d+ +\d+ ", 3))),
    )),
    Block("histories-cpu", (
        Step("tune-gems sweep sweeps/four_calendars_cpu.yaml --name four && tune-gems analyze experiments/four",
             keep=(r"^tune-gems sweep: (data|split of [^:]*): ", FINISHED, *SWEEP_TABLE, (DECIDED, 1), *GEM_TABLE, r"^g\d+: ",
                   r"^    per history")),
    ), unordered=(FINISHED,)),
    Block("histories-cpu-plan", (Step("tune-gems plan experiments/four"),), needs=("histories-cpu",)),
    Block("histories-cpu-confirm", (
        Step("tune-gems confirm experiments/four", drop=(r"^HEALTH_DIAG ", r"^\[\w+\] HEALTH_DIAG ", r": epoch \d+/\d+ \|")),
    ), needs=("histories-cpu",)),
    Block("dry-run", (
        Step("tune-gems sweep sweeps/smoke.yaml --dry-run",
             keep=(r"^tune-gems sweep: threads: ", r"^widest trial: ", r"^memory: ", r"^time: ", r"^sweep: ", r"^dry run: ")),
    )),
)
BY_NAME = {b.name: b for b in BLOCKS}


# -- running ------------------------------------------------------------------------------------


def commands(shown: str) -> list[list[str]]:
    """The argv lists of a shown command line (`a && b` is two); `tune-gems` runs as this
    interpreter's `-m tune_gems`, so the tree checked out here is the one that prints."""
    out = []
    for part in shown.replace("\\\n", " ").split(" && "):
        argv = shlex.split(part)
        out.append([sys.executable, "-m", "tune_gems", *argv[1:]] if argv[0] == "tune-gems" else argv)
    return out


def documents_inputs() -> dict[str, str]:
    """{file name: text} of every `<!-- input: NAME -->` block of the documents."""
    return {m.group(1): m.group(2) for doc in DOCUMENTS for m in INPUT.finditer(doc.read_text())}


def prepare(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if not (work / name).exists():
            (work / name).symlink_to(REPO / name)
    for name, text in documents_inputs().items():
        (work / name).write_text(text)


def relative(text: str, work: Path) -> str:
    """Paths of the scratch folder and of the repository as a user in a fresh clone sees them."""
    for root in (work.resolve(), work, REPO):
        text = text.replace(f"{root}/", "")
    return text


def run_step(step: Step, work: Path, env: dict[str, str] | None = None) -> str:
    """The step's commands, one after another as `&&` would (a failure ends the block); the
    stream it pastes, paths made relative."""
    chunks = []
    for argv in commands(step.shown):
        res = subprocess.run(argv, cwd=work, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                             timeout=TIMEOUT_S)
        if res.returncode != 0 and not step.stderr:
            raise RuntimeError(f"{' '.join(argv[2:])} exited {res.returncode}:\n{res.stderr[-3000:]}")
        chunks.append(res.stderr if step.stderr else res.stdout)
    return relative("".join(chunks), work)


def _compiled(keep) -> list[tuple[re.Pattern, int | None]]:
    return [(re.compile(k), None) if isinstance(k, str) else (re.compile(k[0]), k[1]) for k in keep]


def trim(output: str, step: Step) -> list[str]:
    """The pasted lines of a step's output (see Step): `...` between kept lines that had lines
    left out between them; a blank line kept only between two kept lines."""
    lines = [line.rstrip() for line in output.splitlines()]
    lines = [line for line in lines if not any(re.search(d, line) for d in step.drop)]
    if step.keep is None:
        kept = [True] * len(lines)
    else:
        rules, counts = _compiled(step.keep), {}
        kept = []
        for line in lines:
            hit = next((i for i, (p, n) in enumerate(rules) if p.search(line) and (n is None or counts.get(i, 0) < n)), None)
            if hit is not None:
                counts[hit] = counts.get(hit, 0) + 1
            kept.append(hit is not None)
    out, gap = [], False
    for i, (line, keep) in enumerate(zip(lines, kept)):
        blank_between = not line and out and any(kept[i + 1:i + 2])
        if keep or blank_between:
            if gap and out:
                out.append(ELIDED)
            for pattern, replacement in step.edits:
                line = re.sub(pattern, replacement, line)
            out.append(line)
            gap = False
        else:
            gap = True
    return out


def run_blocks(names: list[str], work: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """{name: the block's fresh text} for `names` and the blocks they need, run in `work`."""
    prepare(work)
    order: list[str] = []

    def add(name: str) -> None:
        for need in BY_NAME[name].needs:
            add(need)
        if name not in order:
            order.append(name)

    for name in names:
        add(name)
    fresh = {}
    for name in order:
        lines = []
        for step in BY_NAME[name].steps:
            pasted = trim(run_step(step, work, env), step)
            if step.show:
                lines += [f"$ {step.shown}", *pasted]
        fresh[name] = "\n".join(lines) + "\n"
    return fresh


# -- the documents ------------------------------------------------------------------------------


def cpu_code_path(cpuinfo: str | None = None) -> str:
    """The CPU that decides a run's bits beyond the CLI's pins: its vendor (MKL's `MKL_CBWR`
    branch is honoured on Intel CPUs only: on this AMD machine AVX2, AVX512 and SSE4_2 gave the
    same products, COMPATIBLE others) and its widest vector set."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return "unknown"
    vendor = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("vendor_id")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    width = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return f"{vendor} {width}"


@dataclass
class Pasted:
    document: Path
    text: str
    cpu: str | None


def pasted_blocks() -> dict[str, Pasted]:
    """{name: the pasted block} of every marked output in the documents."""
    out = {}
    for doc in DOCUMENTS:
        for m in OUTPUT.finditer(doc.read_text()):
            out[m.group(1)] = Pasted(doc, m.group(4), m.group(2))
    return out


def rewrite(fresh: dict[str, str], cpu: str) -> list[Path]:
    """Every marked block named in `fresh` replaced by its fresh text, its marker stamped with `cpu`."""
    changed = []
    for doc in DOCUMENTS:
        text = doc.read_text()

        def swap(m: re.Match) -> str:
            if m.group(1) not in fresh:
                return m.group(0)
            return f"<!-- output: {m.group(1)}; cpu {cpu} -->\n{m.group(3)}{fresh[m.group(1)]}```"

        new = OUTPUT.sub(swap, text)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed


# -- comparing ----------------------------------------------------------------------------------

NOT_COMPARED = (
    r"(?<![\w.])[0-9a-f]{8}(?![\w.])",  # a trial id (all digits too: a word of 8 hex digits)
    r"\bsps=\d+",  # steps per second
    r"\| best [^|]*\|",  # the best so far: which trial finished first is the scheduler's
    r"(?<=trial )\d+(?=/\d+ finished)",  # a finished trial's place in that order
    r"\b\d+m\d+s\b", r"\b\d+s\b",  # elapsed, ETA
    r"[-+]?\d+(\.\d+)?\s?(ms|us|s|min|h)\b",  # durations: a dry run's or a plan's times, measured
    r"\bthreads: .*", r"with \d+ CPU thread\(s\)",  # the CPU threads: this machine's and this environment's
)
"""What a comparison leaves out: wall-clock figures, the CPU thread count (the machine's, the
environment's: the same bits at any count) and trial ids (masked before numbers are read)."""
NUMBER = re.compile(r"\d{4}-\d\d-\d\d|[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?%?|[-+]?inf\b|\bnan\b")
"""A number as printed (a date one token), compared as text: 0.103 is not 0.1030."""


def numbers(text: str, unordered: tuple[str, ...] = ()) -> list[str]:
    """The numbers of a block as printed, wall-clock figures and trial ids masked out; the lines
    matching `unordered` last, sorted (their order is the scheduler's)."""
    ordered, loose = [], []
    for line in text.splitlines():
        if line.startswith("$ "):
            continue  # the command as shown
        rows = loose if any(re.search(u, line) for u in unordered) else ordered  # before the masks change the line
        for pattern in NOT_COMPARED:
            line = re.sub(pattern, " ", line)
        rows.append(NUMBER.findall(line))
    return [n for row in ordered for n in row] + [n for row in sorted(loose) for n in row]


def mismatch(name: str, pasted: str, fresh: str) -> str | None:
    """Why the pasted block's numbers are not the fresh output's, or None when they are."""
    unordered = BY_NAME[name].unordered
    a, b = numbers(pasted, unordered), numbers(fresh, unordered)
    if a == b:
        return None
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"{name}: number {first + 1} of the pasted block is {a[first] if first < len(a) else '(none)'}, this tree prints "
            f"{b[first] if first < len(b) else '(none)'} ({len(a)} numbers pasted, {len(b)} printed)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"blocks to regenerate (default: all): {', '.join(BY_NAME)}")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder for the commands (default: a new temporary one)")
    parser.add_argument("--check", action="store_true", help="compare the pasted blocks' numbers with this tree's; write nothing")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown block(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    names = args.names or list(BY_NAME)
    work = args.work or Path(tempfile.mkdtemp(prefix="tune-gems-outputs-"))
    fresh = {n: t for n, t in run_blocks(names, work).items() if n in names}
    pasted = pasted_blocks()
    (work / "fresh").mkdir(exist_ok=True)
    for name, text in fresh.items():  # what this tree printed, trimmed, to read beside the documents
        (work / "fresh" / f"{name}.txt").write_text(text)
    if args.check:
        problems = [mismatch(n, pasted[n].text, fresh[n]) if n in pasted else f"{n}: no block marked in the documents"
                    for n in names]
        for p in filter(None, problems):
            print(p)
        return 1 if any(problems) else 0
    for doc in rewrite(fresh, cpu_code_path()):
        print(f"rewrote {doc.relative_to(REPO)}")
    missing = [n for n in names if n not in pasted]
    if missing:
        print(f"not marked in any document: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
