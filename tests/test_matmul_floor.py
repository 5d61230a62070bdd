"""CPU tests of benchmarks/matmul_floor.py's recorder (the timing itself needs CUDA).

The floor is only as good as its list of products: the recorder must see the network's forward
products and both backward products of every layer, with their layouts, and rebuild operands
with exactly those strides."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from learner_fixtures import tiny_config

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "matmul_floor.py"


def _load():
    spec = importlib.util.spec_from_file_location("matmul_floor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mf = _load()


def _recorded(population: int = 3):
    from tune_gems.trainer.trainer import Trainer

    cfg = tiny_config(f"trainer.population={population}", "gems.g12.mode=measure")
    trainer = Trainer(cfg, log=None)
    trainer._prefill()
    return cfg, mf.record_products(trainer.learner)


def test_records_forward_and_both_backward_products_of_every_layer():
    cfg, products = _recorded()
    P, H, B = 3, cfg.model.hidden, cfg.trainer.batch_size
    forward = [p for p in products if p.op == "baddbmm"]
    backward = [p for p in products if p.op == "bmm" and not p.is_matrix_vector]
    # the online trunk's second layer [P, 2B rows, H] @ [H, H]: forward once with autograd
    trunk = [p for p in forward if p.mnk == (P, 2 * B, H, H)]
    assert trunk, sorted({p.mnk for p in forward})
    # its backward: grad_x = grad @ W^T (P, 2B, H, H) and grad_W = x^T @ grad (P, H, H, 2B)
    assert any(p.mnk == (P, 2 * B, H, H) for p in backward)
    assert any(p.mnk == (P, H, H, 2 * B) for p in backward)
    # a transposed operand keeps its layout (the backward reads x^T as a view)
    assert any(p.operands[0].stride[-2] == 1 for p in backward)
    # the spectral norm's power iteration is matrix-vector: counted, not in the floor
    summary = mf.summarise(products)
    assert summary["matrix_vector_left_out"] > 0 and summary["products"] == len(products) - summary["matrix_vector_left_out"]


def test_operands_are_rebuilt_with_the_recorded_strides():
    _, products = _recorded()
    gen = torch.Generator().manual_seed(0)
    for p in products[:40]:
        for o in p.operands:
            t = mf.strided_random(o, torch.float32, torch.device("cpu"), gen)
            assert tuple(t.shape) == o.shape and tuple(t.stride()) == o.stride
    step = mf.build_step([p for p in products if not p.is_matrix_vector], torch.float32, torch.device("cpu"), repeat=2)
    assert len(step()) == 2 * sum(not p.is_matrix_vector for p in products)


def test_iteration_rows_are_matched_on_population_precision_batch_and_blocks():
    rows = [
        {"mode": "graph", "gems": "measure", "precision": "tf32", "P": 64, "iter_us": 10.0},
        {"mode": "graph", "gems": "measure", "precision": "tf32", "P": 768, "batch": 128, "blocks": 12, "iter_us": 99.0},
    ]
    assert mf.iteration_us(rows, 64, "tf32", 256, 1) == 10.0
    assert mf.iteration_us(rows, 64, "tf32", 128, 12) == 99.0
    assert mf.iteration_us(rows, 64, "bf16", 256, 1) is None


def test_padded_products_round_matrix_dimensions_and_keep_broadcasts():
    p = mf.Product("baddbmm", (mf.Operand((2, 1, 153), (153, 0, 1)), mf.Operand((2, 512, 64), (64, 128, 1)), mf.Operand((2, 64, 153), (9792, 153, 1))))
    q = mf.padded(p)
    assert [o.shape for o in q.operands] == [(2, 1, 160), (2, 512, 64), (2, 64, 160)]
    assert q.operands[2].stride == (10240, 160, 1)
    torch.baddbmm(*(mf.strided_random(o, torch.float32, torch.device("cpu"), torch.Generator()) for o in q.operands))


def test_tflops_column_is_gflop_per_microsecond_times_a_thousand():
    # 49.32 GFLOP in 1113 us (the P=64 tf32 floor on the H200) is 44.3 TFLOP/s, not 0.0
    assert abs(mf.tflops(49.32, 1113.0) - 44.31) < 0.01
    assert mf.tflops(1.0, 1e6) == 1e-3  # one GFLOP in one second
