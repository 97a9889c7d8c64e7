"""Each benchmark run's config: a shipped pretrain config plus visible overrides, nothing else.

A run is exactly what a user would type inside a solo-learn checkout::

    python main_pretrain.py --config-path pkg://attnce_plugin.configs \\
        --config-name pretrain/<family>/<recipe>.yaml <overrides...>

with three kinds of overrides, in this order (later ones win):

1. the method's (:data:`METHOD_RECIPES`): the SimCLR and MoCo v3 baselines are the shipped
   AttentionNCE configs with ``method_kwargs.loss`` switched to solo-learn's own loss and no
   positive crops, so a baseline differs from its AttentionNCE row only in the loss and the views
   (each switch is tested step for step against solo-learn's ``simclr`` / ``mocov3``);
2. the budget's (:func:`budget_overrides`): data, epochs, batch size, seed, the CPU and evaluation
   settings, the run's folders;
3. the user's ``--set`` values.

The composed, resolved config is saved as the run's ``config.yaml`` with the shipped config's
name and every override in its header; ``docs/results.md`` lists the overrides too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from attnce_bench.plan import RunSpec

#: Hydra search-path entry of the shipped configs.
CONFIG_ROOT = "pkg://attnce_plugin.configs"


class BenchConfigError(ValueError):
    """A benchmark setting is unknown or inconsistent."""


#: For each bench method: (shipped recipe file, overrides that make the method).
METHOD_RECIPES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "simclr": ("attentionnce", ("++method_kwargs.loss=simclr", "++views.num_positives=0")),
    "mocov3": ("mocov3_attentionnce", ("++method_kwargs.loss=mocov3", "++views.num_positives=0")),
    "attentionnce": ("attentionnce", ()),
    "mocov3_attentionnce": ("mocov3_attentionnce", ()),
    # The frontier's multi-crop variant: the shipped multi-crop config (small positives).
    "attentionnce_multicrop": ("attentionnce_multicrop", ()),
}


@dataclass(frozen=True)
class DatasetSpec:
    """How the bench runs on one dataset choice.

    Attributes:
        family: the shipped config family (``attnce_plugin/configs/pretrain/<family>/``).
        solo_dataset: solo-learn's ``data.dataset``.
        val_size: validation image side the bench's hook sets for ``custom`` data (0: solo's own).
    """

    family: str
    solo_dataset: str
    val_size: int = 0


#: ``--dataset`` choices. Fashion-MNIST (32 px) runs the CIFAR family's configs as ``custom`` data,
#: so solo-learn gives it ResNet's ImageNet stem (its CIFAR stem is ~6x slower on a CPU).
DATASETS: Dict[str, DatasetSpec] = {
    "fashion_mnist": DatasetSpec("cifar", "custom", val_size=32),
    "cifar10": DatasetSpec("cifar", "cifar10"),
    "cifar100": DatasetSpec("cifar", "cifar100"),
    "stl10": DatasetSpec("stl10", "stl10"),
    "imagenet100": DatasetSpec("imagenet-100", "imagenet100"),
    "custom": DatasetSpec("custom", "custom"),
}


@dataclass
class Budget:
    """Settings every run of one benchmark shares (see :func:`budget_overrides`).

    Attributes:
        dataset: a :data:`DATASETS` key.
        batch_size: images per step per device.
        num_workers: data loader workers; None keeps the config's.
        train_path / val_path: the data folders (val None: no validation, no probe).
        crop_size: anchors' crop size; None keeps the config's (Fashion-MNIST: 32).
        limit_train_batches / limit_val_batches: Lightning's, None for whole epochs.
        cpu: run on the CPU (accelerator cpu, one process, fp32, no SyncBatchNorm).
        sets: ``--set`` values: (method or None for all, dotted key, value string).
    """

    dataset: str
    batch_size: int
    num_workers: Optional[int]
    train_path: str
    val_path: Optional[str]
    crop_size: Optional[int] = None
    limit_train_batches: Optional[int] = None
    limit_val_batches: Optional[int] = None
    cpu: bool = True
    sets: Tuple[Tuple[Optional[str], str, str], ...] = ()


@dataclass
class RunConfig:
    """One run's config: what main_pretrain.py is given and what it resolves to."""

    config_name: str
    overrides: List[str]
    hydra_overrides: List[str]
    resolved: DictConfig = field(repr=False)

    def header(self) -> str:
        """The ``config.yaml`` header: where the config comes from."""
        lines = [f"# {self.config_name} from attnce_plugin.configs, with these overrides:"]
        lines += [f"#   {o}" for o in self.overrides]
        return "\n".join(lines) + "\n"


def parse_set(text: str) -> Tuple[Optional[str], str, str]:
    """Parse a ``--set`` value: ``key=value`` (all runs) or ``method:key=value`` (one method)."""
    if "=" not in text:
        raise BenchConfigError(f"--set {text!r}: expected KEY=VALUE or METHOD:KEY=VALUE")
    lhs, value = text.split("=", 1)
    method: Optional[str] = None
    if ":" in lhs:
        method, lhs = lhs.split(":", 1)
    lhs = lhs.strip().lstrip("+")
    if not lhs:
        raise BenchConfigError(f"--set {text!r}: empty key")
    return method, lhs, value.strip()


def config_name(method: str, dataset: str) -> str:
    """The shipped primary config a bench method runs on a dataset."""
    if method not in METHOD_RECIPES:
        raise BenchConfigError(
            f"unknown method {method!r}; allowed values are {list(METHOD_RECIPES)}"
        )
    if dataset not in DATASETS:
        raise BenchConfigError(f"--dataset={dataset!r}: allowed values are {list(DATASETS)}")
    return f"pretrain/{DATASETS[dataset].family}/{METHOD_RECIPES[method][0]}.yaml"


def budget_overrides(budget: Budget, spec: RunSpec, run_dir: Path) -> List[str]:
    """The overrides that fit a shipped config to the benchmark's budget and folders."""
    ds = DATASETS[budget.dataset]
    out = [
        f"++data.dataset={ds.solo_dataset}",
        f"++data.train_path={budget.train_path}",
    ]
    out.append(f"++data.val_path={budget.val_path}" if budget.val_path else "~data.val_path")
    if budget.num_workers is not None:
        out.append(f"++data.num_workers={budget.num_workers}")
    crop = budget.crop_size or (ds.val_size or None)
    if crop is not None:
        out.append(f"++views.crop_size={crop}")
    out += [
        f"++name={spec.method}-{budget.dataset}-seed{spec.seed}",
        f"++seed={spec.seed}",
        f"++max_epochs={spec.epochs}",
        f"++optimizer.batch_size={budget.batch_size}",
        # solo's default of 10 warm-up epochs is longer than the CPU budget's whole run.
        "++scheduler.warmup_epochs=1",
        "++knn_eval.enabled=True",
        "++knn_eval.k=20",
        f"++checkpoint.dir={run_dir / 'ckpt'}",
        "++checkpoint.keep_prev=False",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++num_sanity_val_steps=0",
        "++enable_progress_bar=False",
    ]
    if budget.cpu:
        # solo scales the lr by len(devices): a digit string is one CPU process (docs/solo-learn.md).
        out += [
            "++accelerator=cpu",
            "++devices='1'",
            "++strategy=auto",
            "++sync_batchnorm=False",
            "++precision='32'",
        ]
    if budget.limit_train_batches is not None:
        out.append(f"++limit_train_batches={budget.limit_train_batches}")
    if budget.limit_val_batches is not None:
        out.append(f"++limit_val_batches={budget.limit_val_batches}")
    return out


def run_overrides(spec: RunSpec, budget: Budget, run_dir: Path) -> List[str]:
    """Every override of one run: method, settings of the spec, budget, ``--set`` values."""
    out = list(METHOD_RECIPES[spec.method][1])
    if spec.num_positives:
        out.append(f"++views.num_positives={spec.num_positives}")
    out += [f"++{key}={_value(value)}" for key, value in spec.settings]
    out += budget_overrides(budget, spec, run_dir)
    for method, key, value in budget.sets:
        if method is None or method == spec.method:
            out.append(f"++{key}={value}")
    return out


def _value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def hydra_overrides(run_dir: Path, val_size: int) -> List[str]:
    """The bench's own Hydra callback (epoch log, validation size) added to the run."""
    key = "hydra.callbacks.attnce_bench"
    out = [
        f"+{key}._target_=attnce_bench.hooks.BenchHooks",
        f"+{key}.log_file={run_dir / 'epochs.jsonl'}",
    ]
    if val_size:
        out.append(f"+{key}.val_size={val_size}")
    return out


def compose(config: str, overrides: Sequence[str]) -> DictConfig:
    """Compose a shipped config with overrides and resolve it, as main_pretrain.py would get it.

    Raises:
        BenchConfigError: the config or an override is not valid (Hydra's message included).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
            cfg = hydra_compose(config, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise BenchConfigError(f"{config} with overrides {list(overrides)}: {err}") from err
    return cfg


def run_config(spec: RunSpec, budget: Budget, run_dir: Path) -> RunConfig:
    """The config of one run (see the module docstring)."""
    name = config_name(spec.method, budget.dataset)
    overrides = run_overrides(spec, budget, run_dir)
    val_size = DATASETS[budget.dataset].val_size if budget.val_path else 0
    if budget.crop_size and val_size:
        val_size = budget.crop_size
    return RunConfig(name, overrides, hydra_overrides(run_dir, val_size), compose(name, overrides))


def save_run_config(run: RunConfig, path: Path) -> None:
    """Write the resolved config with its provenance header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run.header() + OmegaConf.to_yaml(run.resolved))


def base_setting(method: str, dataset: str, key: str) -> float:
    """A numeric ``method_kwargs`` value of the shipped config (e.g. the ablation's base d_neg)."""
    cfg = compose(config_name(method, dataset), [])
    return float(cfg.method_kwargs[key])
