"""Part 1: the loss on the device against float64, in fp32, TF32, fp16 and bf16 autocast.

Two comparisons for each precision mode and both loss forms (SimCLR form, MoCo v3 form):

* small batch against ``tests/helpers/reference.py``, the independent float64 implementation of the
  published formula (one anchor at a time, so only small batches are affordable);
* a large batch (4096 images on CUDA) against the plugin's own loss in float64 on the same device
  (the loss computes in fp64 for fp64 inputs), with the forward+backward time of each mode: what
  TF32 (``torch.set_float32_matmul_precision("high")``) costs in accuracy and gains in time.

For fp16 / bf16 the inputs are rounded to that type first, as a projector under autocast returns
them, and the reference gets the same rounded values: the error shown is the loss's own. The loss
computes in fp32 under autocast; its gradients come back in the inputs' type (for fp16 with the
loss scaled by 2^16 during backward, as GradScaler does in training).
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from attnce_bench.gpu_check import REPO_ROOT
from attnce_bench.gpu_check.common import PartContext, check, fmt, part_main
from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

MODES = ("fp32", "tf32", "fp16 autocast", "bf16 autocast")

#: Sanity gates (relative error of the loss, of the gradients) per mode: generous on purpose, they
#: catch a broken path, the table gives the numbers. Half-precision gradients are rounded to the
#: inputs' type, TF32 rounds matmul inputs to a 10-bit mantissa.
GATES: Dict[str, Tuple[float, float]] = {
    "fp32": (1e-5, 1e-4),
    "tf32": (1e-2, 5e-2),
    "fp16 autocast": (1e-3, 1e-2),
    "bf16 autocast": (1e-2, 5e-2),
}

#: GradScaler's initial scale (Lightning's 16-mixed), applied to fp16 backward passes here too.
FP16_LOSS_SCALE = 2.0**16

SIMCLR = {"tau": 0.5, "d_pos": 4.0, "d_neg": 1.0}  # the shipped custom configs' attention scales
MOCO = {"tau": 0.2, "d_pos": 4.0, "d_neg": 1.0}


def load_reference():
    """``tests/helpers/reference.py`` (the float64 reference the test suite uses), loaded by path."""
    path = REPO_ROOT / "tests" / "helpers" / "reference.py"
    spec = importlib.util.spec_from_file_location("attnce_float64_reference", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path} not found: the float64 reference travels with the repo")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(b: int, m: int, d: int, seed: int = 0) -> Dict[str, torch.Tensor]:
    """Anchors [2b, d], positives [b, m, d], indexes, and MoCo query / key / positive keys, with
    each image's views pulled together so the attention has something to weigh."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(b, d, generator=g)
    anchors = torch.randn(2 * b, d, generator=g) + 2 * centre.repeat(2, 1)
    positives = torch.randn(b, m, d, generator=g) + 2 * centre.unsqueeze(1)
    indexes = torch.randperm(max(1000, 4 * b), generator=g)[:b]
    query = torch.randn(b, d, generator=g) + 2 * centre
    key = torch.randn(b, d, generator=g) + 2 * centre
    pos_keys = torch.randn(b, m, d, generator=g) + 2 * centre.unsqueeze(1)
    return {
        "anchors": anchors,
        "positives": positives,
        "indexes": indexes,
        "query": query,
        "key": key,
        "pos_keys": pos_keys,
    }


@contextlib.contextmanager
def precision_mode(mode: str, device: torch.device) -> Iterator[Optional[torch.dtype]]:
    """Matmul precision and autocast of ``mode``; yields the input dtype (None: fp32)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if mode == "tf32" else "highest")
    try:
        if mode.endswith("autocast"):
            dtype = torch.float16 if mode.startswith("fp16") else torch.bfloat16
            with torch.autocast(device_type=device.type, dtype=dtype):
                yield dtype
        else:
            yield None
    finally:
        torch.set_float32_matmul_precision(previous)


def _rounded(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    return x if dtype is None else x.to(dtype)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def _input_dtype(mode: str) -> Optional[torch.dtype]:
    return {"fp16 autocast": torch.float16, "bf16 autocast": torch.bfloat16}.get(mode)


LossFn = Callable[[Dict[str, torch.Tensor], bool], Tuple[torch.Tensor, List[torch.Tensor]]]


def simclr_fn(x: Dict[str, torch.Tensor], _: bool) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    loss = attentionnce_loss_func(
        x["anchors"], x["positives"], x["indexes"], SIMCLR["tau"], SIMCLR["d_pos"], SIMCLR["d_neg"]
    )
    return loss, [x["anchors"], x["positives"]]


def moco_fn(x: Dict[str, torch.Tensor], _: bool) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    loss = attentionnce_mocov3_loss_func(
        x["query"], x["key"], x["pos_keys"], MOCO["tau"], MOCO["d_pos"], MOCO["d_neg"]
    )
    return loss, [x["query"]]


#: Which inputs each form differentiates (keys come from the momentum network).
GRAD_KEYS = {"simclr": ("anchors", "positives"), "moco": ("query",)}
FORMS = {"simclr": simclr_fn, "moco": moco_fn}


def prepare(
    inputs: Dict[str, torch.Tensor], form: str, device: torch.device, dtype: Optional[torch.dtype]
) -> Dict[str, torch.Tensor]:
    """Inputs on ``device`` in ``dtype`` (floats only), leaves requiring grad where trained."""
    out = {}
    for name, value in inputs.items():
        value = value.to(device)
        if value.is_floating_point():
            value = _rounded(value, dtype).detach().requires_grad_(name in GRAD_KEYS[form])
        out[name] = value
    return out


def loss_and_grads(
    form: str, x: Dict[str, torch.Tensor]
) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """Loss and its gradients (fp32 for half inputs).

    With fp16 inputs the loss is scaled by :data:`FP16_LOSS_SCALE` before backward and the
    gradients unscaled after, as Lightning's GradScaler does in training: unscaled, gradients of
    order 1 / b fall into fp16's subnormal range at large b.
    """
    loss, wrt = FORMS[form](x, True)
    scale = FP16_LOSS_SCALE if wrt[0].dtype == torch.float16 else 1.0
    grads = torch.autograd.grad(loss * scale, wrt)
    if scale != 1.0:
        grads = tuple(g.float() / scale for g in grads)
    return loss, list(grads)


def reference_loss(
    ref, form: str, x: Dict[str, torch.Tensor]
) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """tests/helpers/reference.py on float64 copies of ``x`` (CPU), loss and gradients."""
    y = {
        k: (
            v.detach().double().cpu().requires_grad_(k in GRAD_KEYS[form])
            if v.is_floating_point()
            else v.cpu()
        )
        for k, v in x.items()
    }
    if form == "simclr":
        loss = ref.simclr_form(
            y["anchors"],
            y["positives"],
            y["indexes"],
            SIMCLR["tau"],
            SIMCLR["d_pos"],
            SIMCLR["d_neg"],
        )
    else:
        loss = ref.mocov3_form(
            y["query"], y["key"], y["pos_keys"], MOCO["tau"], MOCO["d_pos"], MOCO["d_neg"]
        )
    grads = torch.autograd.grad(loss, [y[k] for k in GRAD_KEYS[form]])
    return loss, list(grads)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(call: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``call`` after one warm-up call."""
    call()
    _sync(device)
    samples = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        call()
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(ctx: PartContext) -> None:
    device = torch.device(ctx.device)
    if ctx.cuda:
        torch.cuda.init()
    ref = load_reference()
    small = (8, 3, 16) if ctx.tiny else (64, 4, 128)
    big = (64, 4, 32) if ctx.tiny else ((4096, 4, 128) if ctx.cuda else (512, 4, 128))
    repeats = 3 if ctx.tiny else (25 if ctx.cuda else 5)
    small_in, big_in = make_inputs(*small, seed=0), make_inputs(*big, seed=1)

    ctx.emit(
        f"device {ctx.device}, torch {torch.__version__}. Small batch b = {small[0]}, "
        f"M = {small[1]}, d = {small[2]} against tests/helpers/reference.py (float64, CPU); large "
        f"batch b = {big[0]}, M = {big[1]}, d = {big[2]} against the plugin's loss in float64 "
        f"on the same device; time = median forward+backward of {repeats} calls. SimCLR form "
        f"tau {SIMCLR['tau']}, d_pos {SIMCLR['d_pos']}, d_neg {SIMCLR['d_neg']}; MoCo form "
        f"tau {MOCO['tau']}. Errors are relative (norm of the difference / norm of the "
        "reference), gradients over every differentiated input."
    )
    if not ctx.cuda:
        ctx.emit(
            "On the CPU `set_float32_matmul_precision('high')` (the tf32 row) is expected to "
            "change nothing: TF32 is a GPU format."
        )
    ctx.emit()
    failures: List[str] = []
    results: Dict[str, Dict[str, Dict[str, float]]] = {}
    for form in ("simclr", "moco"):
        rows = []
        ref_small = {}
        for mode in MODES:
            dtype = _input_dtype(mode)
            xs = prepare(small_in, form, device, dtype)
            with precision_mode(mode, device):
                loss, grads = loss_and_grads(form, xs)
            if mode not in ref_small:
                ref_small[mode] = reference_loss(ref, form, xs)
            want_loss, want_grads = ref_small[mode]
            err_loss = _rel(loss, want_loss)
            err_grad = _rel(
                torch.cat([g.flatten() for g in grads]).float(),
                torch.cat([g.flatten() for g in want_grads]),
            )

            xb = prepare(big_in, form, device, dtype)
            with precision_mode(mode, device):
                big_loss, big_grads = loss_and_grads(form, xb)
            x64 = {
                k: (
                    v.detach().double().requires_grad_(k in GRAD_KEYS[form])
                    if v.is_floating_point()
                    else v
                )
                for k, v in xb.items()
            }
            want_big, want_big_grads = loss_and_grads(form, x64)
            err_big = _rel(big_loss, want_big)
            err_big_grad = _rel(
                torch.cat([g.flatten() for g in big_grads]).double(),
                torch.cat([g.flatten() for g in want_big_grads]),
            )
            finite = bool(torch.isfinite(big_loss)) and all(
                bool(torch.isfinite(g).all()) for g in [*grads, *big_grads]
            )

            def call(xb=xb, mode=mode, form=form) -> None:
                with precision_mode(mode, device):
                    loss_and_grads(form, xb)

            seconds = time_call(call, device, repeats)
            gate_loss, gate_grad = GATES[mode]
            ok = (
                finite
                and max(err_loss, err_big) <= gate_loss
                and max(err_grad, err_big_grad) <= gate_grad
            )
            if not ok:
                failures.append(
                    f"{form} {mode}: loss err {fmt(max(err_loss, err_big))} (gate "
                    f"{gate_loss}), grad err {fmt(max(err_grad, err_big_grad))} (gate "
                    f"{gate_grad}), finite {finite}"
                )
            results.setdefault(form, {})[mode] = {
                "loss_err_small": err_loss,
                "grad_err_small": err_grad,
                "loss_err_big": err_big,
                "grad_err_big": err_big_grad,
                "ms_big": seconds * 1e3,
                "finite": finite,
            }
            rows.append(
                [
                    mode,
                    fmt(err_loss),
                    fmt(err_grad),
                    fmt(err_big),
                    fmt(err_big_grad),
                    fmt(seconds * 1e3),
                    "yes" if finite else "NO",
                    "ok" if ok else "**FAIL**",
                ]
            )
            ctx.data["results"] = results
            ctx.save()
        title = (
            "SimCLR form (`attentionnce_loss_func`)"
            if form == "simclr"
            else "MoCo v3 form (`attentionnce_mocov3_loss_func`)"
        )
        ctx.emit(f"### {title}")
        ctx.emit()
        ctx.table(
            [
                "mode",
                f"loss err, b={small[0]} vs reference",
                "grad err",
                f"loss err, b={big[0]} vs fp64",
                "grad err",
                f"ms fwd+bwd, b={big[0]}",
                "finite",
                "gate",
            ],
            rows,
        )

    s = results["simclr"]
    tf32_speed = s["fp32"]["ms_big"] / s["tf32"]["ms_big"]
    ctx.data["tf32_speedup_simclr"] = tf32_speed
    ctx.emit(
        f"TF32 against fp32 (SimCLR form, b = {big[0]}): time x{1 / tf32_speed:.2f}, loss "
        f"error {fmt(s['tf32']['loss_err_big'])} against {fmt(s['fp32']['loss_err_big'])}, "
        f"gradient error {fmt(s['tf32']['grad_err_big'])} against "
        f"{fmt(s['fp32']['grad_err_big'])}."
    )
    ctx.key = (
        f"fp32 err {fmt(s['fp32']['loss_err_small'], 2)}; fp16 "
        f"{fmt(s['fp16 autocast']['loss_err_small'], 2)}; bf16 "
        f"{fmt(s['bf16 autocast']['loss_err_small'], 2)}; TF32 b={big[0]}: err "
        f"{fmt(s['tf32']['loss_err_big'], 2)} vs {fmt(s['fp32']['loss_err_big'], 2)}, "
        f"time x{1 / tf32_speed:.2f}"
    )
    check(not failures, "; ".join(failures))


if __name__ == "__main__":
    sys.exit(part_main(run))
