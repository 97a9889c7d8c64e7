"""GPU paths checked on the CPU (issue 13): what a GPU run meets that a CPU run does not.

* ``attnce-knn``: solo-learn's kNN options completed or refused before any feature is extracted;
  checkpoints loaded where ``main_knn.py``'s ``.cuda()`` batches are (the end-to-end runs on a
  real checkpoint are in ``tests/plugin/solo/test_scripts.py``).
* torchmetrics >= 1.0 breaks solo-learn's kNN: refused at the start, naming the fix.
* ``method_kwargs.compile`` with ``sync_batchnorm`` (every shipped GPU config): refused.
* The losses leave the process's float32 matmul precision (TF32) alone.

Need solo-learn >= 1.0.6; FAIL (not skip) without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.configs import compose_pretrain_cfg  # noqa: E402

import attnce_plugin.cli as cli  # noqa: E402
import attnce_plugin.cli.knn as knn_cli  # noqa: E402
import attnce_plugin.solo_compat as solo_compat  # noqa: E402
from attnce_plugin.losses import (  # noqa: E402
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
    attentionnce_mocov3_loss_func,
    attentionnce_mocov3_loss_with_attention,
)
from attnce_plugin.methods import (  # noqa: E402
    AttentionNCE,
    MethodConfigError,
    MoCoV3AttentionNCE,
    core,  # noqa: E402
)
from attnce_plugin.solo_compat import IncompatibleTorchmetricsError  # noqa: E402

METHOD_CONFIGS = [
    (AttentionNCE, "attentionnce.yaml"),
    (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml"),
]

# --------------------------------------------------------------------------- attnce-knn arguments


@pytest.fixture
def ckpt_dir(tmp_path: Path) -> Path:
    """A folder shaped like a pretraining run's (the argument checks only look at the names)."""
    (tmp_path / "args.json").write_text(json.dumps({"method": "attentionnce"}))
    (tmp_path / "run-ep=0.ckpt").write_bytes(b"")
    return tmp_path


def _required(ckpt_dir: Path) -> List[str]:
    return [
        "--pretrained_checkpoint_dir",
        str(ckpt_dir),
        "--dataset",
        "custom",
        "--train_data_path",
        str(ckpt_dir),
    ]


def test_knn_options_get_solo_defaults_when_absent(ckpt_dir):
    argv = _required(ckpt_dir)
    completed = knn_cli.complete_knn_argv(argv)
    assert completed[: len(argv)] == argv
    args = knn_cli.parse_knn_argv(completed)
    # solo-learn's own scripts/knn/imagenet-100/knn.sh values.
    assert args.k == [1, 2, 5, 10, 20, 50, 100, 200]
    assert args.temperature == [0.01, 0.02, 0.05, 0.07, 0.1, 0.2, 0.5, 1.0]
    assert args.feature_type == ["backbone", "projector"]
    assert args.distance_function == ["euclidean", "cosine"]


def test_knn_options_given_are_kept_in_every_argparse_form(ckpt_dir):
    # "--feature" is argparse's abbreviation of --feature_type; "--k=3" the "=" form.
    argv = _required(ckpt_dir) + ["--k=3", "--feature", "backbone", "--temperature", "0.1"]
    assert knn_cli.missing_knn_options(argv) == ["distance_function"]
    args = knn_cli.parse_knn_argv(knn_cli.complete_knn_argv(argv))
    assert args.k == [3] and args.feature_type == ["backbone"] and args.temperature == [0.1]
    assert args.distance_function == ["euclidean", "cosine"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (
            ["--feature_type", "backbon"],
            "--feature_type backbon: allowed values are backbone, projector",
        ),
        (
            ["--distance_function", "manhattan"],
            "--distance_function manhattan: allowed values are cosine, euclidean",
        ),
        (["--k", "5", "0"], "--k 0: must be integers >= 1"),
        (["--temperature", "0"], "--temperature 0.0: must be finite numbers > 0"),
    ],
)
def test_knn_values_refused_before_extraction(ckpt_dir, extra, message):
    with pytest.raises(knn_cli.KnnArgumentError, match=message):
        knn_cli.complete_knn_argv(_required(ckpt_dir) + extra)


def test_knn_checkpoint_folder_checked(tmp_path):
    argv = ["--dataset", "custom", "--train_data_path", str(tmp_path)]
    with pytest.raises(knn_cli.KnnArgumentError, match="--pretrained_checkpoint_dir is required"):
        knn_cli.complete_knn_argv(argv)
    with pytest.raises(
        knn_cli.KnnArgumentError, match="must be a folder holding a .ckpt and its args.json"
    ):
        knn_cli.complete_knn_argv(argv + ["--pretrained_checkpoint_dir", str(tmp_path)])


def test_knn_main_runs_solo_script_with_completed_argv(ckpt_dir, monkeypatch):
    calls: List[Any] = []
    monkeypatch.setattr(
        knn_cli, "run_solo_script", lambda script, argv: calls.append((script, argv))
    )
    knn_cli.main(_required(ckpt_dir) + ["--k", "3"])
    assert calls and calls[0][0] == "main_knn.py"
    args = knn_cli.parse_knn_argv(calls[0][1])
    assert args.k == [3] and args.feature_type == ["backbone", "projector"]


# --------------------------------------------------------------------------- checkpoint device


@pytest.mark.parametrize("cuda,expected", [(True, "cuda"), (False, "cpu")])
def test_wrapper_loads_checkpoints_to_the_gpu_when_there_is_one(cuda, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert cli.checkpoint_map_location() == expected
    seen: List[Any] = []
    # The script itself is not run: what matters is the map location in force while it runs.
    monkeypatch.setattr(
        cli.runpy, "run_path", lambda *a, **k: seen.append(core._DEFAULT_MAP_LOCATION.get())
    )
    monkeypatch.setattr("sys.argv", ["attnce-knn"])
    cli.run_solo_script("main_knn.py", [])
    assert seen == [expected]
    assert core._DEFAULT_MAP_LOCATION.get() is None  # only for the script's run


# --------------------------------------------------------------------------- torchmetrics


@pytest.mark.parametrize("version", ["1.0.0", "1.9.0", "2.0.0rc1"])
def test_torchmetrics_that_breaks_solo_knn_is_named(version, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", version)
    problem = solo_compat.knn_torchmetrics_problem()
    assert problem is not None and f"torchmetrics {version} is installed" in problem
    assert "pip install torchmetrics==0.11.4" in problem and "compute_on_step" in problem
    # A solo-learn that no longer passes compute_on_step would run: nothing to refuse.
    monkeypatch.setattr(solo_compat, "_solo_knn_passes_compute_on_step", lambda: False)
    assert solo_compat.knn_torchmetrics_problem() is None


@pytest.mark.parametrize("version", ["0.6.2", "0.10.3", "0.11.4"])
def test_torchmetrics_that_works_passes(version, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", version)
    assert solo_compat.knn_torchmetrics_problem() is None


@pytest.mark.parametrize("cls,config", METHOD_CONFIGS)
def test_online_knn_refused_at_start_with_new_torchmetrics(
    cls, config, tiny_image_folder, monkeypatch
):
    import torchmetrics

    train = tiny_image_folder["train"]
    real = cls(compose_pretrain_cfg(config, train, ["++knn_eval.enabled=True", "++knn_eval.k=3"]))
    assert real.knn_eval and real.knn.k == 3  # the installed torchmetrics runs solo's kNN
    monkeypatch.setattr(torchmetrics, "__version__", "1.9.0")
    cfg = compose_pretrain_cfg(config, train, ["++knn_eval.enabled=True"])
    with pytest.raises(IncompatibleTorchmetricsError) as err:
        cls(cfg)  # main_pretrain.py builds the method before the Trainer and the data
    for text in (
        "knn_eval.enabled=True",
        "torchmetrics 1.9.0",
        "pip install torchmetrics==0.11.4",
        "set knn_eval.enabled=False",
    ):
        assert text in str(err.value)
    # Without online kNN nothing needs solo-learn's kNN.
    assert not cls(compose_pretrain_cfg(config, train, ["++knn_eval.enabled=False"])).knn_eval


def test_knn_wrapper_refuses_new_torchmetrics_before_running(ckpt_dir, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", "1.9.0")
    monkeypatch.setattr(knn_cli, "run_solo_script", lambda *a: pytest.fail("main_knn.py was run"))
    with pytest.raises(SystemExit) as err:
        knn_cli.main(_required(ckpt_dir))
    assert "attnce-knn" in str(err.value) and "pip install torchmetrics==0.11.4" in str(err.value)


# --------------------------------------------------------------------------- compile + SyncBN


@pytest.mark.parametrize("cls,config", METHOD_CONFIGS)
def test_compile_with_sync_batchnorm_refused(cls, config, tiny_image_folder):
    train = tiny_image_folder["train"]
    cfg = compose_pretrain_cfg(config, train, ["+method_kwargs.compile=true"])
    assert cfg.sync_batchnorm is True  # what every shipped (GPU) config sets
    with pytest.raises(MethodConfigError) as err:
        cls(cfg)
    for text in (
        "method_kwargs.compile=true",
        "sync_batchnorm=True",
        "SyncBatchNorm",
        "Allowed: method_kwargs.compile=false with sync_batchnorm=True",
    ):
        assert text in str(err.value)
    # Either one alone is accepted.
    cls(compose_pretrain_cfg(config, train, ["+method_kwargs.compile=false"]))
    cls(
        compose_pretrain_cfg(config, train, ["+method_kwargs.compile=true", "sync_batchnorm=False"])
    )


# --------------------------------------------------------------------------- matmul precision


def _precision_state() -> Dict[str, Any]:
    """Every process-wide switch of float32 matmul / convolution precision this torch has."""
    state: Dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    backends = torch.backends
    for name, obj, attr in (
        ("cuda.matmul.allow_tf32", backends.cuda.matmul, "allow_tf32"),
        ("cuda.matmul.fp32_precision", backends.cuda.matmul, "fp32_precision"),
        (
            "cuda.matmul.allow_fp16_rr",
            backends.cuda.matmul,
            "allow_fp16_reduced_precision_reduction",
        ),
        (
            "cuda.matmul.allow_bf16_rr",
            backends.cuda.matmul,
            "allow_bf16_reduced_precision_reduction",
        ),
        ("cudnn.allow_tf32", backends.cudnn, "allow_tf32"),
        ("cudnn.fp32_precision", backends.cudnn, "fp32_precision"),
        ("mkldnn.fp32_precision", getattr(backends, "mkldnn", None), "fp32_precision"),
        ("fp32_precision", backends, "fp32_precision"),
    ):
        if obj is not None and hasattr(obj, attr):
            state[name] = getattr(obj, attr)
    return state


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_losses_leave_matmul_precision_alone(precision, monkeypatch):
    """The losses follow the caller's float32 matmul precision (TF32 under "high" on a GPU; see
    docs/reliability.md) and never set it, not even for a moment."""
    calls: List[str] = []
    original = torch.get_float32_matmul_precision()
    set_precision = torch.set_float32_matmul_precision
    try:
        set_precision(precision)
        before = _precision_state()
        monkeypatch.setattr(torch, "set_float32_matmul_precision", calls.append)
        g = torch.Generator().manual_seed(0)
        b, m, d = 8, 3, 16
        anchors = torch.randn(2 * b, d, generator=g, requires_grad=True)
        positives = torch.randn(b, m, d, generator=g, requires_grad=True)
        q, k, pk = (
            torch.randn(*s, generator=g, requires_grad=True) for s in ((b, d), (b, d), (b, m, d))
        )
        losses = [
            attentionnce_loss_func(anchors, positives, torch.arange(b), 0.5, 1.0, 10.0),
            attentionnce_loss_with_attention(
                anchors, positives, torch.arange(b), 0.5, 1.0, 0.5
            ).loss,
            attentionnce_mocov3_loss_func(q, k, pk, 0.2, 1.0, 1.0),
            attentionnce_mocov3_loss_with_attention(q, k, pk, 0.2, 1.0, 1.0).loss,
        ]
        torch.stack(losses).sum().backward()  # backward's matmuls run outside the calls
        assert calls == []
        assert _precision_state() == before
    finally:
        set_precision(original)


class _TF32Matmuls(torch.overrides.TorchFunctionMode):
    """Rounds every fp32 input of a matmul to TF32's 10-bit mantissa (round to nearest even), with
    fp32 accumulation: what float32_matmul_precision("high") makes a GPU's tensor cores do."""

    MATMULS = {
        torch.mm,
        torch.bmm,
        torch.addmm,
        torch.matmul,
        torch.Tensor.__matmul__,
        torch.Tensor.matmul,
        torch.Tensor.mm,
        torch.Tensor.bmm,
    }

    @staticmethod
    def round(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32):
            return x
        bits = x.contiguous().view(torch.int32)
        bits = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
        return bits.view(torch.float32).view(x.shape)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.MATMULS:
            args = tuple(self.round(a) for a in args)
        return func(*args, **(kwargs or {}))


@pytest.mark.gpu
@pytest.mark.parametrize("tau,d_neg", [(0.5, 10.0), (0.05, 0.05)])
def test_tf32_matmuls_move_the_loss_little(tau, d_neg):
    """CPU emulation of TF32 in the loss's forward matmuls: the loss moves by < 1e-4 relative
    (measured 5e-7 to 3e-5; docs/reliability.md). The cost and the gradients on a real GPU are
    scripts/gpu_check.sh's to measure."""
    g = torch.Generator().manual_seed(0)
    b, m, d = 256, 4, 128
    base = torch.randn(b, d, generator=g)
    anchors = torch.cat([base + 0.5 * torch.randn(b, d, generator=g) for _ in range(2)])
    positives = base.unsqueeze(1) + 0.8 * torch.randn(b, m, d, generator=g)
    calls = [
        lambda: attentionnce_loss_func(anchors, positives, torch.arange(b), tau, 1.0, d_neg),
        lambda: attentionnce_mocov3_loss_func(anchors[:b], anchors[b:], positives, tau, 1.0, d_neg),
    ]
    for call in calls:
        fp32 = call()
        with _TF32Matmuls():
            tf32 = call()
        assert tf32 != fp32  # the emulation reached the loss's matmuls
        assert abs(float(tf32 - fp32)) < 1e-4 * abs(float(fp32))


def test_solo_learn_lines_the_plugin_relies_on_still_hold():
    """attnce_plugin.patches.RELIANCES, the knn wrapper's two included: an upgraded solo-learn
    that breaks one fails here by name."""
    from attnce_plugin.patches import RELIANCES, check_reliances

    assert any(r.patch.startswith("attnce-knn map location") for r in RELIANCES)
    assert check_reliances() == []
