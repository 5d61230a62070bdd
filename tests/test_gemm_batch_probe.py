"""CPU tests of benchmarks/gemm_batch_probe.py's logic (its findings need the GPU): the sweep
sees a planted P-dependence and passes a P-invariant op, operands keep the learner's layout, the
tile variants put a member at the same place of the same call whatever P, a product a variant
cannot run is recorded as failed, and the recommendation is the fastest variant P-invariant
everywhere."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gemm_batch_probe as probe  # noqa: E402 (a benchmark script, imported as test_seed_blocks imports its own)

PLAN = {"device": "cpu", "ps": (1, 2, 3, 8), "timed_ps": (8,)}


def test_the_sweep_flags_an_op_whose_member_bits_depend_on_p_and_passes_one_that_does_not():
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))

    def planted(P: int) -> torch.Tensor:  # member values scaled by a P-dependent rounding
        return x[:P] * (1.0 + P * 2.0**-20)

    clean = probe._sweep(lambda P: x[:P] * 3.0, lambda m: x[m : m + 1] * 3.0, 1, PLAN)
    bad = probe._sweep(planted, lambda m: x[m : m + 1] * (1.0 + 2.0**-20), 1, PLAN)
    assert clean["invariant"] and clean["differs_at"] == [] and set(clean["us"]) == {"8"}
    assert not bad["invariant"] and bad["differs_at"] == [2, 3, 8] and bad["max_diff"] > 0


def test_operands_keep_the_recorded_layout_and_a_member_alone_keeps_it_too():
    gen = torch.Generator().manual_seed(1)
    # a gradient read transposed, and a bias viewed from a wider parameter matrix (member stride 1000)
    for shape, stride in (([2, 64, 256], [16384, 1, 64]), ([2, 1, 51], [1000, 51, 1])):
        big = probe._operand(shape, stride, 6, torch.float32, "cpu", gen)
        assert list(big.shape) == [6, *shape[1:]] and list(big.stride()) == stride
        alone = probe._fresh(big[3:4])
        assert alone.stride() == big[3:4].stride() and torch.equal(alone, big[3:4]) and alone.data_ptr() != big.data_ptr()


def test_a_tiled_call_puts_each_member_at_the_same_place_whatever_p():
    gen = torch.Generator().manual_seed(2)
    b, x, w = torch.randn(7, 1, 5, generator=gen), torch.randn(7, 3, 4, generator=gen), torch.randn(7, 4, 5, generator=gen)
    full = probe.member_tiled(torch.baddbmm, 3, b, x, w)
    assert full.shape == (7, 3, 5) and torch.allclose(full, torch.baddbmm(b, x, w))
    for n in range(1, 8):  # the first n members alone: the same tiles, padded with zero members
        assert torch.equal(probe.member_tiled(torch.baddbmm, 3, b[:n], x[:n], w[:n]), full[:n]), n
    assert torch.equal(probe.member_tiled(torch.bmm, None, x, w), torch.bmm(x, w))


def test_a_product_a_variant_cannot_run_is_counted_failed_untimed_and_never_recommended():
    ok = {"product": "p", "invariant": True, "differs_at": [], "max_diff": 0.0, "us": {"64": 1.0, "192": 2.0}}
    failed = {"product": "q", **probe.failed_row(RuntimeError("OOM trying to allocate workspace for cublaslt\nmore"))}
    assert failed["error"] == "OOM trying to allocate workspace for cublaslt" and not failed["invariant"]
    variants = {"no-workspace|tf32|128": [ok, failed], "tile32|tf32|128": [ok, ok]}
    table = probe.summarise(variants, (64, 192))
    assert table[0] == {"variant": "no-workspace", "precision": "tf32", "batch": 128, "invariant": 1, "products": 2,
                        "failed": 1, "gemm_us_P64": None, "gemm_us_P192": None}  # fmt: skip
    assert table[1]["failed"] == 0 and table[1]["gemm_us_P192"] == 4.0
    assert probe.recommend(table, (64, 192)).startswith("tile32, 4 us")


def test_the_recommendation_is_the_fastest_variant_invariant_in_every_row():
    rows = [
        {"variant": "default", "invariant": 9, "products": 10, "gemm_us_P192": 100.0},
        {"variant": "tile16", "invariant": 10, "products": 10, "gemm_us_P192": 150.0},
        {"variant": "tile8", "invariant": 10, "products": 10, "gemm_us_P192": 180.0},
        {"variant": "no-workspace", "invariant": 10, "products": 10, "gemm_us_P192": 60.0},
        {"variant": "no-workspace", "invariant": 10, "products": 10, "gemm_us_P192": 50.0},
    ]
    assert probe.recommend(rows, (64, 192)).startswith("no-workspace, 110 us")
    assert "CUBLAS_WORKSPACE_CONFIG=:0:0" in probe.recommend(rows, (64, 192))
    assert "member tiles of 16 members" in probe.recommend(rows[:3], (64, 192))
    assert probe.recommend(rows[:1], (64, 192)).startswith("no variant")


def test_the_reductions_probed_are_the_learners():
    shapes = {"batch": 128, "K": 2, "A": 3, "rows": 256, "flat_width": 1000, "clip_groups": [[0, 800], [800, 1000]],
              "spectral_norm": [[33, 256], [256, 256]], "layers": {"trunk0": [1, 256], "adv_out": [2, 153]}}  # fmt: skip
    names = [c[0] for c in probe.reduction_cases(shapes)]
    assert names[:4] == ["clip norm [800 of 1000 columns]", "clip norm [200 of 1000 columns]", "q_mean [128,2,3]", "loss [128]"]
    assert "trunk0 sigma gradient [33,256]" in names and "trunk0 power-iteration norm [33]" in names
    assert "adv_out bias gradient [256,153] over rows" in names
    assert probe._variant_tile("tile16") == 16 and probe._variant_tile("no-workspace") is None and probe._variant_tile("cublaslt") is None
