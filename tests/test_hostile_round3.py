"""The hostile matrix, round three (issue 26): the cases that lost user data, left records that
contradict what ran, reached the last line of defence or ran unbounded.

Every case runs like the matrix's forked families (tests/test_hostile_matrix.py): the real
`tune_gems.commands.cli.main` in a child forked from a server that imported the heavy modules once, in
a sandbox of its own (the working directory, first on sys.path as under `python -m`, so a
plug-in module written there imports), snapshotted before and after. Each must answer exit 2,
exactly one stderr line naming the culprit, no stdout, and leave the sandbox as it was. All are
refused before Ray starts or before any training, so the module stays cheap: one tiny training
epoch makes the run-folder template that the resume cases copy.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from sweep_fixtures import SMOKE, TINY_SWEEP
from test_bad_input import TRAIN_TINY, both, write
from test_hostile_matrix import Case, _experiment, _stored_sweep, misbehaved, run_cases

pytestmark = pytest.mark.slow


@dataclass
class EnvCase(Case):
    env: dict[str, str] = field(default_factory=dict)


MARKER = ".tune-gems-output.json"
LOCK = ".tune-gems.lock"
TINY_TRAIN = ["train", *TRAIN_TINY, "trainer.epochs=1"]
SWEEP = ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "x"]
RESUME_SWEEP = ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "done", "--resume"]
PRICES = "t,close\n" + "".join(f"{i},{100 + (i % 7)}\n" for i in range(1200))
FILE_DATA = ["data.source=file", "data.path=p.csv", "data.splits=[0.6,0.2,0.2]"]


# -- setups ------------------------------------------------------------------------------------


def marker(rel: str, kind: str, **fields) -> Callable[[Path], None]:
    return write(f"{rel}/{MARKER}", json.dumps({"tool": "tune-gems", "kind": kind, "version": 1, **fields}))


def symlink(rel: str, target: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).symlink_to(d / target)

    return go


def mkdir(rel: str) -> Callable[[Path], None]:
    return lambda d: (d / rel).mkdir(parents=True)


def fifo(rel: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(d / rel)

    return go


VICTIM = write("victim.txt", "the user's own file")

_RUN: list[Path] = []


def _train_run(dest: Path) -> Path:
    """A copy of a real one-epoch train run of the tiny config (made once per module)."""
    if not _RUN:
        import tempfile

        from tune_gems.config.load import load_config
        from tune_gems.trainer.train_command import run_training

        import atexit

        home = Path(tempfile.mkdtemp(prefix="tg-round3-"))
        atexit.register(shutil.rmtree, home, True)
        run_training(load_config(None, [*TRAIN_TINY, "trainer.epochs=2", "trainer.checkpoint_every=1"]), home / "run", progress=False)
        _RUN.append(home / "run")
    shutil.copytree(_RUN[0], dest, symlinks=True)
    return dest


def train_run(change: Callable[[Path], None] = lambda run: None) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        change(_train_run(d / "out"))

    return go


def _edit_csv(name: str, edit: Callable) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        import pandas as pd

        edit(pd.read_csv(run / name)).to_csv(run / name, index=False)

    return change


def _nan_weights(run: Path) -> None:
    import torch

    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    payload["state"]["online.params"][0, 0] = float("nan")
    torch.save(payload, run / "checkpoint.pt")


def _checkpoint_past_the_run(run: Path) -> None:
    import torch

    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    payload["meta"]["epoch"] = 5
    payload["meta"]["history"] += [{**payload["meta"]["history"][-1], "epoch": e} for e in (3, 4, 5)]
    torch.save(payload, run / "checkpoint.pt")


def stored_train(*overrides: str, edit_config: bool = False, edit_data: bool = False) -> Callable[[Path], None]:
    """out/ as a train run leaves it before its first checkpoint: marker (with the checksums
    this version records), config.yaml; then config.yaml or the data file edited by hand."""

    def go(d: Path) -> None:
        from tune_gems.config.load import load_config
        from tune_gems.contracts.run_record import checksums, data_fingerprint

        (d / "out").mkdir()
        if any(o.startswith("data.source=file") for o in overrides):
            (d / "p.csv").write_text(PRICES)
        old = os.getcwd()
        os.chdir(d)
        try:
            cfg = load_config(None, [*TRAIN_TINY, *overrides])
            text = __import__("yaml").safe_dump(cfg.to_dict(), sort_keys=False)
            fields = {"checksums": checksums(None, **{"config.yaml": text.encode()})}
            data = data_fingerprint(cfg.data)
            if data:
                fields["data"] = data
        finally:
            os.chdir(old)
        (d / "out" / "config.yaml").write_text(text)
        marker("out", "train", **fields)(d)
        if edit_config:
            (d / "out" / "config.yaml").write_text(text.replace("lr: 0.0005", "lr: 0.002"))
        if edit_data:
            (d / "p.csv").write_text(PRICES.replace("\n5,105\n", "\n5,150\n"))

    return go


def edited_stored_spec(d: Path) -> None:
    """A stored sweep whose marker records its spec's checksum; spec.yaml then edited by hand."""
    from tune_gems.contracts.run_record import checksums

    _stored_sweep("store/done")(d)
    spec = d / "store" / "done" / "spec.yaml"
    marker("store/done", "sweep", checksums=checksums(None, **{"spec.yaml": spec.read_bytes()}))(d)
    assert "num_samples: 4" in spec.read_text()
    spec.write_text(spec.read_text().replace("num_samples: 4", "num_samples: 5"))


def sweep_on_changed_data(d: Path) -> None:
    """A stored sweep on a price file (its marker records the spec's and the file's checksums);
    the price file then edited in place."""
    import yaml

    from tune_gems.contracts.run_record import checksums, data_fingerprint
    from tune_gems.sweep.spec_load import load_spec

    (d / "p.csv").write_text(PRICES)
    spec = load_spec(SMOKE, [*TINY_SWEEP, "config.data.source=file", f"config.data.path={d / 'p.csv'}", "config.data.splits=[0.6,0.2,0.2]"])
    _stored_sweep("store/done")(d)
    text = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False).encode()
    (d / "store" / "done" / "spec.yaml").write_bytes(text)
    marker("store/done", "sweep", checksums=checksums(None, **{"spec.yaml": text}), data=data_fingerprint(spec.base_config().data))(d)
    (d / "p.csv").write_text(PRICES.replace("\n5,105\n", "\n5,150\n"))


def plugin(name: str, body: str) -> Callable[[Path], None]:
    head = "from tune_gems.gems import Gem, register\nMEAN = lambda x: x.q_t.mean((1, 2, 3))\n"
    return write(f"{name}.py", head + body)


def metric_plugin(metric: str) -> Callable[[Path], None]:
    return plugin("shadow", f"register(Gem(name='mine', metric={metric!r}, description='x', reference=MEAN))\n")


GOOD_PLUGIN = plugin("good", "register(Gem(name='mine', metric='mine_value', description='x', reference=MEAN))\n")

FACTORS_1E12 = "arms:\n  factors:\n" + "".join(
    f"    {key}: [{', '.join(str(round(1e-4 * (i + 1), 6)) for i in range(1000))}]\n"
    for key in ("gems.g6.weight", "gems.g10.weight", "gems.g12.weight", "trainer.lr")
)


def arms_spec(arms: str, search: str = "") -> Callable[[Path], None]:
    """A spec of design none whose config has `arms` (YAML under config:, indented 2)."""
    text = ("design: none\nnum_samples: 2\nobjective: {metric: val_sharpe_mean}\nconfig:\n  seed: 0\n"
            + "\n".join("  " + line for line in arms.splitlines()) + "\n" + search)
    return write("spec.yaml", text)


LR_SEARCH = "search:\n  params:\n    trainer.lr: {type: float, low: 0.0001, high: 0.01, log: true}\n"


# -- cases -------------------------------------------------------------------------------------


def cases() -> list[EnvCase]:
    C = EnvCase
    c = [
        # user files deleted or written through a symlink
        C("analyze-overwrite-keeps-a-users-notes", ["analyze", "exp", "--overwrite"], ["notes.txt", "not written"],
          both(_experiment(), marker("exp/analysis", "analyze", files=["report.md"]), write("exp/analysis/report.md", "old"),
               write("exp/analysis/notes.txt", "mine"))),
        C("analyze-overwrite-keeps-a-run-three-levels-down", ["analyze", "exp", "--out", "ana", "--overwrite"], ["a/b/run/", "not written"],
          both(_experiment(), marker("ana", "analyze", files=["report.md"]), write("ana/report.md", "old"),
               write("ana/a/b/run/config.yaml", "seed: 0\n"), write("ana/a/b/run/checkpoint.pt", b"x"))),
        C("analyze-default-out-symlinked-to-a-users-folder", ["analyze", "exp", "--overwrite"], ["analysis", "symlink"],
          both(_experiment(), marker("mine", "analyze", files=["report.md"]), write("mine/report.md", "r"), write("mine/notes.txt", "mine"),
               symlink("exp/analysis", "mine"))),
        C("train-lock-symlinked-to-a-users-file", [*TINY_TRAIN, "--out", "out"], ["--out", LOCK, "symlink"],
          both(VICTIM, symlink(f"out/{LOCK}", "victim.txt"))),
        C("train-lock-is-a-folder", [*TINY_TRAIN, "--out", "out"], ["--out", LOCK, "folder"], mkdir(f"out/{LOCK}")),
        C("train-lock-is-a-fifo", [*TINY_TRAIN, "--out", "out"], ["--out", LOCK, "FIFO"], fifo(f"out/{LOCK}")),
        C("train-resume-temp-name-symlinked", ["train", "--out", "out", "--resume"], ["--out", ".history.csv.tmp", "symlink"],
          both(VICTIM, stored_train(), symlink("out/.history.csv.tmp", "victim.txt"))),
        C("train-resume-checkpoint-temp-symlinked", ["train", "--out", "out", "--resume"], ["--out", "checkpoint.pt.tmp", "symlink"],
          both(VICTIM, train_run(), symlink("out/checkpoint.pt.tmp", "victim.txt"))),
        C("sweep-resume-temp-name-symlinked", RESUME_SWEEP, ["done", ".trials.parquet.tmp", "symlink"],
          both(VICTIM, write("spec.yaml", SMOKE.read_text()), _stored_sweep("store/done"), symlink("store/done/.trials.parquet.tmp", "victim.txt"))),
        # records that would lie after a resume
        C("train-resume-edited-config", ["train", "--out", "out", "--resume"], ["config.yaml", "edited"], stored_train(edit_config=True)),
        C("train-resume-changed-data-file", ["train", "--out", "out", "--resume"], ["data.path", "p.csv", "changed"],
          stored_train(*FILE_DATA, edit_data=True)),
        C("sweep-resume-edited-stored-spec", RESUME_SWEEP, ["spec.yaml", "edited"], both(write("spec.yaml", SMOKE.read_text()), edited_stored_spec)),
        C("sweep-resume-changed-data-file", RESUME_SWEEP, ["data.path", "p.csv", "changed"],
          both(write("spec.yaml", SMOKE.read_text()), sweep_on_changed_data)),
        C("sweep-key-searched-and-set-by-arms", SWEEP, ["search.params.trainer.lr", "config.arms"],
          arms_spec("arms:\n  list:\n    - {name: a, trainer.lr: 0.001}\n    - {name: b, trainer.lr: 0.002}", LR_SEARCH)),
        C("train-resume-nan-weights", ["train", "--out", "out", "--resume"], ["checkpoint.pt", "online.params", "NaN"], train_run(_nan_weights)),
        C("train-resume-checkpoint-past-the-run", ["train", "--out", "out", "--resume"], ["checkpoint.pt", "past"], train_run(_checkpoint_past_the_run)),
        C("train-resume-history-extra-column", ["train", "--out", "out", "--resume"], ["history.csv", "extra columns"],
          train_run(_edit_csv("history.csv", lambda t: t.assign(forged=1.0)))),
        C("train-resume-history-longer-than-the-run", ["train", "--out", "out", "--resume"], ["history.csv", "epochs"],
          train_run(_edit_csv("history.csv", lambda t: __import__("pandas").concat([t, t.assign(epoch=t["epoch"] + 2)] * 2)))),
        # tracebacks before
        C("sweep-sampler-seed-negative", [*SWEEP, "sampler_seed=-1"], ["sampler_seed"], write("spec.yaml", SMOKE.read_text())),
        C("sweep-sampler-seed-2-to-the-32", [*SWEEP, "sampler_seed=4294967296"], ["sampler_seed"], write("spec.yaml", SMOKE.read_text())),
        C("train-arms-factorial-1e12", ["train", "c.yaml", *TRAIN_TINY, "--out", "out"], ["arms.factors", "at most 256"], write("c.yaml", FACTORS_1E12)),
        C("sweep-arms-factorial-1e12", SWEEP, ["arms.factors", "at most 256"],
          arms_spec(FACTORS_1E12)),
        C("train-data-path-nul-byte", ["train", "c.yaml", *TRAIN_TINY, "--out", "out"], ["data.path", "NUL"],
          write("c.yaml", 'data: {source: file, path: "p\\0.csv"}\n')),
        C("train-out-component-256", [*TINY_TRAIN, "--out", "x" * 256], ["--out", "255"]),
        C("train-out-path-4100", [*TINY_TRAIN, "--out", "/".join(["y" * 200] * 21)], ["--out", "4095"]),
        C("train-string-value-too-long", [*TINY_TRAIN, "data.price_column=" + "c" * 5000, "--out", "out"], ["data.price_column", "4096"]),
        C("train-config-file-huge", ["train", "c.yaml", "--out", "out"], ["c.yaml", "bytes"],
          write("c.yaml", "data:\n  price_column: " + "c" * (2 << 20) + "\n")),
        C("train-synthetic-n-1e7", [*TINY_TRAIN, "data.synthetic.n=10000000", "--out", "out"], ["data.synthetic.n"]),
        C("analyze-alpha-1e-300", ["analyze", "exp", "--alpha", "1e-300"], ["--alpha"], _experiment()),
        C("analyze-calibrate-n-sim-1e6", ["analyze", "exp", "--calibrate", "--n-sim", "1000000"], ["--n-sim"], _experiment()),
        C("sweep-gs-storage-without-network", [*SWEEP[:-4], "storage_timeout_s=1", "--storage", "gs://tune-gems-no-such-bucket", "--name", "x"],
          ["--storage", "gs://", "no answer"], write("spec.yaml", SMOKE.read_text())),
        # plug-ins
        *[C(f"plugin-metric-is-a-result-column-{m}", [*TINY_TRAIN, "plugins=[shadow]", "--out", "out"], ["plugins: shadow", m, "result column"],
            metric_plugin(m)) for m in ("val_alpha_sharpe_mean", "train_s", "val_sharpe", "seed", "arm", "trial_id", "objective")],
        C("plugin-entry-is-a-builtin-module", [*TINY_TRAIN, "plugins=[tune_gems.gems.builtin]", "--out", "out"], ["plugins", "part of tune-gems"]),
        C("plugin-listed-twice", [*TINY_TRAIN, "plugins=[good, good]", "--out", "out"], ["plugins: good is listed twice"], GOOD_PLUGIN),
        C("plugin-raises-only-with-gradients", [*TINY_TRAIN, "plugins=[gradonly]", "--out", "out"], ["gems.mine", "with gradients"],
          plugin("gradonly", "import torch\ndef f(x):\n    if torch.is_grad_enabled():\n        raise RuntimeError('no grad support')\n    return MEAN(x)\n"
                             "register(Gem(name='mine', metric='mine_value', description='x', reference=f))\n")),
        C("plugin-value-in-another-dtype", [*TINY_TRAIN, "plugins=[double]", "--out", "out"], ["gems.mine", "float32", "float64"],
          plugin("double", "register(Gem(name='mine', metric='mine_value', description='x', reference=lambda x: MEAN(x).double()))\n")),
        C("plugin-import-hangs", [*TINY_TRAIN, "plugins=[sleepy]", "--out", "out"], ["plugins: sleepy", "more than 1 s"],
          write("sleepy.py", "import time\ntime.sleep(600)\n"), env={"TUNE_GEMS_PLUGIN_IMPORT_TIMEOUT_S": "1"}),
        C("sweep-runs-the-plugin-dry-check", [*SWEEP, "config.plugins=[wrong]"], ["spec.yaml", "gems.mine", "shape"],
          both(write("spec.yaml", SMOKE.read_text()),
               plugin("wrong", "register(Gem(name='mine', metric='mine_value', description='x', reference=lambda x: x.q_t.mean((2, 3))))\n"))),
    ]
    for case in c:
        case.family = "round3"
    return c


CASES = cases()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("round3"), env_of=lambda c: c.env)


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


def test_every_round_three_case_is_one_line_exit_2_and_changes_nothing(outcomes):
    misbehaved(CASES, outcomes)
