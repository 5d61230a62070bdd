"""The outputs pasted in README.md and docs/*.md are this tree's (issue 38 item 3): every marked
block is one `docs/regenerate_outputs.py` knows how to make, and the README's main job (sweep and
analyze, then confirm) printed now by this tree has the numbers the README shows, except
wall-clock figures and trial ids. One run of the main job serves the module (~20 s of trials,
~6 s analyze, ~25 s confirm on 2 quiet cores).

A block records the CPU it was made on: a sweep's bits depend on the CPU's vendor beyond the
CLI's pins (MKL honours `MKL_CBWR`'s branch on Intel CPUs only), so on a CPU of another kind the
comparison is skipped, naming both."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from sweep_fixtures import REPO, ray_address  # noqa: F401 (fixture)

SCRIPT = REPO / "docs" / "regenerate_outputs.py"
MAIN_JOB = ("main-job", "main-confirm")


def _script():
    spec = importlib.util.spec_from_file_location("regenerate_outputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


outputs = _script()


def test_every_marked_block_is_one_the_script_makes_and_the_main_job_is_marked():
    pasted = outputs.pasted_blocks()
    assert set(pasted) <= set(outputs.BY_NAME), sorted(set(pasted) - set(outputs.BY_NAME))
    assert set(outputs.BY_NAME) <= set(pasted), sorted(set(outputs.BY_NAME) - set(pasted))  # each made block is pasted somewhere
    for name in MAIN_JOB:
        assert pasted[name].document.name == "README.md" and pasted[name].cpu, name  # stamped with the CPU it was made on
    assert "arms_demo.yaml" in outputs.documents_inputs()


SWEEP_OUT = """tune-gems sweep: data: synthetic series, 3000 prices, seed 7
[aaaa1111] HEALTH_DIAG epoch=1 loss=3.9 sps=808 gain [verdict=-0.369] arms=4
[bbbb2222] HEALTH_DIAG epoch=3 loss=3.8 sps=512 gain [verdict=+0.1] arms=4
[aaaa1111] HEALTH_DIAG epoch=3 loss=3.7 sps=700 gain [verdict=+0.2] arms=4
tune-gems sweep: trial 1/2 finished: bbbb2222 TERMINATED after 3 epoch(s), objective verdict_gain=0.100 | best 0.100 (bbbb2222) | 14s elapsed, ETA 11s
tune-gems sweep: trial 2/2 finished: aaaa1111 TERMINATED after 3 epoch(s), objective verdict_gain=0.200 | best 0.200 (aaaa1111) | 1m25s elapsed, ETA 0s

trial_id     status  objective
aaaa1111 TERMINATED      0.200
bbbb2222 TERMINATED      0.100

results: /scratch/experiments/smoke/{trials,history,members}.parquet
analyze: tune-gems analyze /scratch/experiments/smoke
"""


def test_the_sweep_output_is_trimmed_as_the_readme_trims_it(tmp_path):
    step = outputs.BY_NAME["main-job"].steps[0]
    lines = outputs.trim(outputs.relative(SWEEP_OUT.replace("/scratch", str(tmp_path)), tmp_path), step)
    assert lines == [
        "tune-gems sweep: data: synthetic series, 3000 prices, seed 7",
        "...",
        "[bbbb2222] HEALTH_DIAG epoch=3 loss=3.8 sps=512 gain [verdict=+0.1] arms=4",  # one line of the epoch, not every one
        "...",
        SWEEP_OUT.splitlines()[4], SWEEP_OUT.splitlines()[5], "",
        "trial_id     status  objective", "aaaa1111 TERMINATED      0.200", "bbbb2222 TERMINATED      0.100", "",
        "results: experiments/smoke/{trials,history,members}.parquet",  # the scratch folder's path as a fresh clone's
    ]


def test_wall_clock_figures_and_trial_ids_are_not_compared_and_every_other_number_is():
    pasted = "$ tune-gems sweep sweeps/smoke.yaml\n" + "\n".join(outputs.trim(SWEEP_OUT, outputs.BY_NAME["main-job"].steps[0])) + "\n"
    again = (pasted.replace("14s elapsed, ETA 11s", "2m03s elapsed, ETA 1m10s").replace("sps=512", "sps=98")
             .replace("aaaa1111", "0c0c0c0c").replace("bbbb2222", "12345678"))
    assert outputs.mismatch("main-job", pasted, again) is None
    # the two finished-trial lines in the other order (the scheduler's), numbered and with the best so far as printed
    lines = pasted.splitlines()
    first, second = (i for i, line in enumerate(lines) if " finished: " in line)
    lines[first], lines[second] = (
        lines[second].replace("trial 2/2", "trial 1/2"),
        lines[first].replace("trial 1/2", "trial 2/2").replace("best 0.100 (bbbb2222)", "best 0.200 (aaaa1111)"))
    swapped = "\n".join(lines) + "\n"
    assert swapped != pasted and outputs.mismatch("main-job", pasted, swapped) is None
    assert outputs.mismatch("main-job", pasted, swapped.replace("verdict_gain=0.100", "verdict_gain=0.300")) is not None
    for changed in (pasted.replace("0.200", "0.201"), pasted.replace("loss=3.8", "loss=3.9"), pasted.replace("3000 prices", "300 prices"),
                    pasted.replace("aaaa1111 TERMINATED      0.200\n", "")):
        assert outputs.mismatch("main-job", pasted, changed) is not None


def test_durations_of_a_plan_or_a_dry_run_and_the_thread_count_are_masked():
    line = "time: about 27 s of training (measured: prefill 0.34 s, 102.8 ms per iteration, 964 us per member-iteration), 20 member(s)"
    assert outputs.numbers(line) == ["20"]
    assert outputs.numbers("tune-gems confirm: threads: 2 CPU thread(s) (this process's CPU allowance: 2 CPU(s))") == []
    assert outputs.numbers("time: about 49 s of training for the widest trial with 1 CPU thread(s), 5 arm(s)") == ["5"]
    assert outputs.numbers("seeds 8 (12% tie (7 informative)), Holm p 0.69; CI [-inf, +inf] 2009-10-12") == [
        "8", "12%", "7", "0.69", "-inf", "+inf", "2009-10-12"]


def test_the_cpu_kind_is_read_from_cpuinfo():
    intel = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f\n"
    assert outputs.cpu_code_path(intel) == "GenuineIntel avx512"
    assert outputs.cpu_code_path("vendor_id : AuthenticAMD\nflags : sse2 avx2\n") == "AuthenticAMD avx2"


@pytest.fixture(scope="module")
def main_job(tmp_path_factory, ray_address):
    """The README's main job, run once by the script in a scratch folder (the sweep's trials on
    the test process's Ray): {block name: its text}. Not run at all (skipped) on a CPU of another
    kind than every block of it was pasted from, where each test would skip after it: the run
    takes a minute on 2 cores."""
    here, pasted = outputs.cpu_code_path(), outputs.pasted_blocks()
    if all(pasted[name].cpu != here for name in MAIN_JOB):
        pytest.skip(f"the main job's blocks were pasted from a {pasted[MAIN_JOB[0]].cpu} CPU; this one is {here}")
    return outputs.run_blocks(list(MAIN_JOB), tmp_path_factory.mktemp("outputs"), env={"RAY_ADDRESS": ray_address})


@pytest.mark.slow
@pytest.mark.parametrize("name", MAIN_JOB)
def test_the_readmes_main_job_prints_what_is_pasted(name, main_job):
    pasted = outputs.pasted_blocks()[name]
    here = outputs.cpu_code_path()
    if pasted.cpu != here:
        pytest.skip(f"{name} was pasted from a {pasted.cpu} CPU; this one is {here}, whose MKL rounds otherwise")
    problem = outputs.mismatch(name, pasted.text, main_job[name])
    assert problem is None, f"{problem}\nregenerate with: python docs/regenerate_outputs.py {' '.join(MAIN_JOB)}\n{main_job[name]}"


@pytest.mark.slow
def test_the_readmes_gpu_histories_analysis_prints_what_is_pasted(tmp_path):
    """The several-histories section's analysis of the GPU run, from the tables kept in the tree."""
    pasted = outputs.pasted_blocks()["eight-gpu"]
    if pasted.cpu != outputs.cpu_code_path():
        pytest.skip(f"eight-gpu was pasted from a {pasted.cpu} CPU; this one is {outputs.cpu_code_path()}")
    fresh = outputs.run_blocks(["eight-gpu"], tmp_path)["eight-gpu"]
    problem = outputs.mismatch("eight-gpu", pasted.text, fresh)
    assert problem is None, f"{problem}\nregenerate with: python docs/regenerate_outputs.py eight-gpu\n{fresh}"
