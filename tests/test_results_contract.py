"""The results contract between the writers and the analysis (issues 23 and 26): the gems.json
manifest is one record type with one reader, every folder is read under its own manifest, the
analysis iterates over the manifest's gems (a plug-in gem gets magnitudes, trajectories and a
plot panel), and `analyze` refuses, in one line and exit status 2, experiments whose manifests
disagree and trials given twice. Through the CLI's `main` on small synthetic results."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import fake_results as fr
from sweep_fixtures import cli_in_process
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry, folder_manifest, manifest_text, read_manifest
from tune_gems.contracts.errors import DataError
from tune_gems.gems import manifest

PLUGIN = GemEntry("qmag", "q_magnitude", "Q-magnitude penalty", False)


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli_in_process("analyze", *args, "--n-boot", "200", cwd=cwd)


def one_line_refusal(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def write_manifest(folder: Path, entries) -> None:
    (folder / "gems.json").write_text(manifest_text(entries))


def with_plugin(folder: Path) -> Path:
    """A synthetic experiment whose runs also knew a plug-in gem, measured in every trial."""
    for table in ("history", "members"):
        df = pd.read_parquet(folder / f"{table}.parquet")
        df[PLUGIN.metric] = 0.5 * fr.LOSS * df["epoch"] / df["epoch"].max()
        df[f"{PLUGIN.metric}_rel"] = df[PLUGIN.metric] / fr.LOSS
        df.to_parquet(folder / f"{table}.parquet", index=False)
    trials = pd.read_parquet(folder / "trials.parquet")
    trials[f"gems.{PLUGIN.name}.mode"] = "measure"
    trials.to_parquet(folder / "trials.parquet", index=False)
    write_manifest(folder, (*LEGACY_MANIFEST, PLUGIN))
    return folder


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_the_built_in_manifest_is_what_older_results_are_read_with():
    """Older results (no gems.json) hold the three built-ins as they were then: the same names
    and metrics as today's, G10 without a null (its null came with issue 21)."""
    now = {e.name: e for e in manifest()}
    assert [(e.name, e.metric) for e in LEGACY_MANIFEST] == [(e.name, e.metric) for e in now.values()]
    assert [e.has_null for e in LEGACY_MANIFEST] == [True, False, True] and now["g10"].has_null
    assert all(isinstance(e, GemEntry) for e in manifest())


def test_the_one_reader_reads_what_the_writer_writes_and_refuses_the_rest(tmp_path):
    write_manifest(tmp_path, (*manifest(), PLUGIN))
    assert read_manifest(tmp_path) == (*manifest(), PLUGIN)
    (tmp_path / "gems.json").write_text(json.dumps([{"name": "g6", "metric": "g6_branch_indep", "has_null": "yes"}]))
    with pytest.raises(DataError, match="gems.json: not a readable gem list.*has_null"):
        read_manifest(tmp_path)
    (tmp_path / "gems.json").unlink()
    assert read_manifest(tmp_path) is None and folder_manifest(tmp_path) == LEGACY_MANIFEST


def test_a_plugin_gem_gets_magnitudes_trajectories_and_a_plot_panel(tmp_path):
    plain = fr.paired_scenario(tmp_path / "plain", journal=False)
    analyze(str(plain), cwd=tmp_path).check_returncode()
    exp = with_plugin(fr.paired_scenario(tmp_path / "plug", journal=False))
    r = analyze(str(exp), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = exp / "analysis"
    mag = pd.read_csv(out / "gem_magnitudes.csv")
    assert list(dict.fromkeys(mag["gem"])) == ["g6", "g10", "g12", "qmag"]
    row = mag.set_index("gem").loc["qmag"]
    assert row["metric"] == "q_magnitude" and row["mode"] == "measure" and row["n_trials"] == 6
    assert row["rel_max"] == pytest.approx(0.5)
    traj = pd.read_csv(out / "gem_trajectories.csv")
    assert sorted(traj.loc[traj["gem"] == "qmag", "epoch"]) == [1, 2, 3]
    assert "qmag" in set(pd.read_csv(out / "verdicts.csv")["gem"])
    # one column of panels per gem of the manifest: 4 gems draw a figure 4/3 as wide as 3
    w3, h3 = png_size(plain / "analysis" / "gem_magnitudes.png")
    w4, h4 = png_size(out / "gem_magnitudes.png")
    assert (w4, h4) == (w3 * 4 // 3, h3)


def test_each_folder_is_read_under_its_own_manifest(tmp_path):
    """A folder without gems.json (older results) and one whose gems.json lists the same three
    built-ins are analysed together; a folder that knew a plug-in is not (its gem would be
    dropped from the other's tables or read under another's columns), nor one written since G10
    has a null (issue 21: its excess is measured against another baseline)."""
    old = fr.paired_scenario(tmp_path / "old", journal=False)
    new = fr.paired_scenario(tmp_path / "new", g10_rel=0.06, journal=False)
    write_manifest(new, LEGACY_MANIFEST)
    r = analyze(str(old), str(new), "--out", str(tmp_path / "both"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    write_manifest(new, manifest())
    one_line_refusal(analyze(str(old), str(new), "--out", str(tmp_path / "today"), cwd=tmp_path),
                     "list different gems", "only the second has g10 (g10_temporal)")
    plug = with_plugin(fr.paired_scenario(tmp_path / "plug", g10_rel=0.07, journal=False))
    r = analyze(str(old), str(plug), "--out", str(tmp_path / "mixed"), cwd=tmp_path)
    one_line_refusal(r, "list different gems", "only the second has qmag (q_magnitude, no null)",
                     f"{old} (no gems.json", str(plug / "gems.json"))
    assert not (tmp_path / "mixed").exists()


def test_manifests_that_swap_what_a_gem_is_are_refused(tmp_path):
    """Same names, but g6 and g10 with each other's metric and null: reading one folder's tables
    under the other's manifest would swap their verdicts."""
    a = fr.paired_scenario(tmp_path / "a", journal=False)
    b = fr.paired_scenario(tmp_path / "b", g10_rel=0.06, journal=False)
    g6, g10, g12 = LEGACY_MANIFEST
    write_manifest(a, LEGACY_MANIFEST)
    write_manifest(b, (GemEntry("g6", g10.metric, has_null=False), GemEntry("g10", g6.metric), g12))
    one_line_refusal(analyze(str(a), str(b), "--out", str(tmp_path / "out"), cwd=tmp_path),
                     str(a / "gems.json"), str(b / "gems.json"), "list different gems")
    assert not (tmp_path / "out").exists()


def test_the_same_experiment_given_twice_is_refused(tmp_path):
    exp = fr.paired_scenario(tmp_path / "exp", journal=False)
    copy = tmp_path / "elsewhere" / "exp"
    shutil.copytree(exp, copy)
    renamed = tmp_path / "renamed"
    shutil.copytree(exp, renamed)
    trials = pd.read_parquet(renamed / "trials.parquet")
    trials["experiment"] = "renamed"
    trials.to_parquet(renamed / "trials.parquet", index=False)
    for other in (copy, renamed):
        r = analyze(str(exp), str(other), "--out", str(tmp_path / "out"), cwd=tmp_path)
        one_line_refusal(r, f"{other}: trial", f"is also in {exp}", "its seeds would count twice")
    assert not (tmp_path / "out").exists()
    # the same folder named twice is refused naming it (issue 39: before, it was read once, silently)
    r = analyze(str(exp), str(exp), "--out", str(tmp_path / "once"), cwd=tmp_path)
    one_line_refusal(r, f"EXPERIMENT_DIR: {exp} is given twice", "its seeds would count twice")
