"""benchmarks.activation_memory: the bytes autograd saves, against a hand count on a network whose
saved tensors are known, and the table's arithmetic on a shipped config."""

from __future__ import annotations

import torch

from benchmarks import activation_memory


class _Linear(torch.nn.Module):
    """``training_step`` = sum(x @ W): autograd keeps x (for W's gradient) and W (for x's)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 8))

    def training_step(self, batch, batch_idx):
        return (batch[0].requires_grad_() @ self.weight).sum()


def test_saved_bytes_count_each_saved_storage_once():
    x = torch.randn(4, 16)
    assert activation_memory.saved_bytes(_Linear(), [x], "32") == (4 * 16 + 16 * 8) * 4


def test_the_table_scales_one_image_to_each_gpus_share(capsys):
    config = "pretrain/cifar/attentionnce.yaml"
    assert activation_memory.main(["--config", config, "--images", "2", "--gpus", "1", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[-4:]]
    assert [(r[0], r[2]) for r in rows] == [("32", "1"), ("32", "2"), ("bf16-mixed", "1")] + [
        ("bf16-mixed", "2")
    ]
    for precision, mib, _, images, activations, state, total in rows:
        assert abs(float(activations) - int(images) * float(mib) / 1024) < 0.06
        assert abs(float(total) - float(activations) - float(state)) < 0.11  # each rounded
    assert int(rows[0][3]) == 2 * int(rows[1][3])  # two GPUs: half the global batch each
    assert float(rows[2][1]) < float(rows[0][1])  # bf16 activations are smaller
