"""Training a perception model on the twin's own renders, and measuring it on a world's.

Training data: the twin's scene in states drawn from the task's reset distribution, each under
an appearance drawn at a random level up to ``TRAIN_SCALE`` times the strongest shift
(:func:`~twinloop.worlds.camera.draw_appearance`), rendered with its noise and blur. Evaluation:
the appearance a :class:`~twinloop.worlds.camera.CameraWorld` of ``severity`` and world seed
draws (another random stream: never seen in training), against the true keypoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.perception.model import (
    SHIFTS,
    Meta,
    Perception,
    crop,
    encode,
    load_perception,
    n_outputs,
    network,
)
from twinloop.tasks import make_task
from twinloop.worlds.camera import (
    TRAIN_SCALE,
    SceneCamera,
    draw_appearance,
    task_cameras,
    unseen_entries,
    with_size,
)


@dataclass(frozen=True)
class PerceptionConfig:
    """Training and evaluating a perception model.

    Attributes:
        task: the task whose keypoints it predicts (``Task.seen``).
        samples: rendered training images.
        near_goal: the fraction of them whose state is drawn near the goal
            (``Task.near_goal_state``: where a controller must read the pose most accurately,
            and the reset distribution rarely goes), the rest from the reset distribution.
        epochs: passes over them.
        size: image side (px); a camera world must render the same.
        width: channels of the network's first convolution.
        batch: images per gradient step.
        lr: Adam's peak learning rate (one cycle: warmed up over 15% of the steps, then annealed).
        seed: seeds the renders, the initialization and the batches.
        threads: PyTorch CPU threads.
        fine: side (px) of a fine stage's crop around the task's near-goal focus
            (``Task.near_goal_focus``), read at patches of half the first stage's side and
            trained on ``samples`` near-goal renders; 0: none.
        coarse: a checkpoint (or shipped model) whose first stage is kept instead of training one
            (with ``fine``: only the fine stage is trained).
        members: networks in the fine stage (an ensemble: member ``i`` trained as a one-network
            fine stage with seed ``seed + i``, its own renders and initialization; their estimates
            averaged). A ``coarse`` checkpoint's fine members are kept when it has fewer than
            ``members`` reading the same crop side (only the rest are trained); otherwise its fine
            stage is replaced.
        severity: the appearance shift the evaluation's worlds draw (0..3).
        eval_worlds: world seeds of the evaluation (held-out appearances).
        eval_states: states rendered per evaluation world (as many again near the goal, where
            the task draws such states).
        shifts: the evaluation reads each image in this many shifted copies
            (:attr:`~twinloop.perception.Perception.shifts`, 1 to 4; 1: the image only).
        out: the checkpoint written.
    """

    task: str = "push-t"
    samples: int = 12000
    near_goal: float = 0.5
    epochs: int = 30
    size: int = 96
    width: int = 16
    batch: int = 32
    lr: float = 3e-3
    seed: int = 0
    threads: int = 2
    fine: int = 0
    coarse: str | None = None
    members: int = 1
    severity: int = 2
    eval_worlds: tuple[int, ...] = (1000, 1001, 1002, 1003, 1004)
    eval_states: int = 100
    shifts: int = 1
    out: str = "runs/perception/push-t.pt"

    def __post_init__(self):
        for name, low in (("samples", 16), ("epochs", 1), ("size", 16), ("width", 4), ("batch", 1), ("threads", 1),
                          ("eval_states", 1), ("seed", 0), ("fine", 0), ("members", 1), ("shifts", 1)):
            object.__setattr__(self, name, number(getattr(self, name), name, low=low, integer=True))
        number(self.lr, "lr", low=0, low_open=True)
        number(self.near_goal, "near_goal", low=0, high=1)
        number(self.severity, "severity", low=0, high=3, integer=True)
        number(self.shifts, "shifts", low=1, high=len(SHIFTS), integer=True)
        if self.fine and (self.fine > self.size or self.fine % 2):
            raise TwinloopError(f"fine: the crop's side must be even and at most the image's ({self.size} px), "
                                f"got {self.fine}")
        if self.coarse is not None and not self.fine:
            raise TwinloopError("coarse: a kept first stage only makes sense with a fine stage to train (fine > 0)")
        if self.members > 1 and not self.fine:
            raise TwinloopError("members: an ensemble of fine stage networks needs a fine stage (fine > 0)")


def keypoints_of(task) -> tuple[list[int], tuple[bool, ...]]:
    """Indices of the task's seen keypoints in its observation, and which are angles."""
    unseen_entries(task)
    names, units = list(task.obs_names), task.obs_units()
    idx = [names.index(k) for k in task.seen.keypoints]
    return idx, tuple(units[i] == "rad" for i in idx)


def render_dataset(task, n: int, rng: np.random.Generator, size: int, level: Callable[[], float],
                   look_rng: np.random.Generator | None = None, near_goal: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(images (n, S, S, 3) uint8, keypoints (n, k))`` of the twin in states drawn by ``rng``:
    each near the goal (``task.near_goal_state``) with probability ``near_goal``, else from the
    task's reset distribution; each under an appearance of ``level()`` drawn from ``look_rng``
    (default ``rng``)."""
    idx, _ = keypoints_of(task)
    number(near_goal, "near_goal", low=0, high=1)
    if near_goal > 0 and task.near_goal_state(np.random.default_rng(0)) is None:
        raise TwinloopError(f"task {task.name!r} draws no near-goal states (Task.near_goal_state): set near_goal=0")
    cam = SceneCamera(task.model, with_size(task_cameras(task)[:1], size))
    look_rng = rng if look_rng is None else look_rng
    images, values = np.empty((n, size, size, 3), np.uint8), np.empty((n, len(idx)))
    try:
        for i in range(n):
            near = near_goal > 0 and rng.uniform() < near_goal  # no draw at 0: the reset-only stream unchanged
            state = task.near_goal_state(rng) if near else task.initial_state(rng)
            cam.set_appearance(draw_appearance(task.model, look_rng, level()))
            images[i] = next(iter(cam.render(state[: task.model.nq], rng).values()))
            cam.data.qvel[:] = 0.0
            values[i] = task.obs_from_data(cam.model, cam.data)[idx]
    finally:
        cam.close()
    return images, values


def fit(net, images: np.ndarray, targets: np.ndarray, cfg: PerceptionConfig, log: Callable[[str], None],
        what: str = "") -> list[float]:
    """Train ``net`` on ``(N, S, S, 3)`` images and ``(N, n_outputs)`` targets (Adam, one-cycle
    schedule, seeded batches); returns the loss of each epoch."""
    import torch

    x = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
    y = torch.from_numpy(targets)
    steps = cfg.epochs * -(-len(x) // cfg.batch)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=steps, pct_start=0.15)
    gen = torch.Generator().manual_seed(cfg.seed)
    losses = []
    for epoch in range(cfg.epochs):
        net.train()
        total = 0.0
        for b in torch.randperm(len(x), generator=gen).split(cfg.batch):
            loss = torch.nn.functional.mse_loss(net(x[b].float()), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(b)
        losses.append(total / len(x))
        log(f"{what}epoch {epoch + 1}/{cfg.epochs}: loss {losses[-1]:.5f}")
    return losses


def standardization(values: np.ndarray, angles) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-keypoint mean and spread of position targets (angles: 0 and 1)."""
    mean = tuple(0.0 if a else float(values[:, i].mean()) for i, a in enumerate(angles))
    scale = tuple(1.0 if a else float(values[:, i].std() + 1e-9) for i, a in enumerate(angles))
    return mean, scale


def train_coarse(cfg: PerceptionConfig, task, log: Callable[[str], None]) -> tuple[Perception, dict]:
    """The first stage: ``cfg.samples`` renders (a fraction ``cfg.near_goal`` near the goal) of
    the whole image."""
    import torch

    _, angles = keypoints_of(task)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    rng = np.random.default_rng([cfg.seed, 11])
    images, values = render_dataset(task, cfg.samples, rng, cfg.size, lambda: rng.uniform(0.0, 3 * TRAIN_SCALE),
                                    near_goal=cfg.near_goal)
    render_s = time.perf_counter() - t0
    log(f"rendered {cfg.samples} training images in {render_s:.0f} s")
    mean, scale = standardization(values, angles)
    meta = Meta(task=cfg.task, keypoints=tuple(task.seen.keypoints), angles=angles, camera=task_cameras(task)[0].name,
                size=cfg.size, mean=mean, scale=scale, width=cfg.width, seed=cfg.seed)
    net = network(meta, n_outputs(meta))
    losses = fit(net, images, encode(meta, values), cfg, log)
    train_s = time.perf_counter() - t0 - render_s
    return Perception(meta, net), {"losses": losses, "render_seconds": render_s, "train_seconds": train_s}


def fine_region(task, meta: Meta, size: int, values: np.ndarray) -> dict:
    """The fine stage's :class:`Meta` fields: its crop, ``size`` px square around the pixel of
    ``task.near_goal_focus()`` in the twin's own camera, and its region: the centre of the
    near-goal keypoints ``values`` (positions' median, angles' circular mean) and their largest
    distance from it."""
    focus = task.near_goal_focus()
    if focus is None:
        raise TwinloopError(f"task {task.name!r} names no near-goal focus (Task.near_goal_focus): no fine stage")
    cam = SceneCamera(task.model, with_size(task_cameras(task)[:1], meta.size))
    try:
        row, col = cam.pixel(focus)
    finally:
        cam.close()
    r0, c0 = (int(np.clip(round(v - size / 2 + 0.5), 0, meta.size - size)) for v in (row, col))
    ang = np.array(meta.angles)
    centre = np.where(ang, np.angle(np.exp(1j * values).mean(axis=0)), np.median(values, axis=0))
    d = values - centre
    d[:, ang] = np.angle(np.exp(1j * d[:, ang]))
    gate = (float(np.linalg.norm(d[:, ~ang], axis=1).max()) if (~ang).any() else 1.0,
            float(np.abs(d[:, ang]).max()) if ang.any() else 1.0)
    return {"fine_crop": (r0, c0, size), "fine_patch": max(1, meta.patch // 2),
            "fine_centre": tuple(float(v) for v in centre), "fine_gate": gate}


def train_fine(cfg: PerceptionConfig, task, coarse: Perception, log: Callable[[str], None]) -> tuple[Perception, dict]:
    """``coarse`` with a fine stage (:attr:`PerceptionConfig.fine`) trained on ``cfg.samples``
    near-goal renders (their own random stream)."""
    import torch

    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    rng = np.random.default_rng([cfg.seed, 19])
    images, values = render_dataset(task, cfg.samples, rng, coarse.meta.size, lambda: rng.uniform(0.0, 3 * TRAIN_SCALE),
                                    near_goal=1.0)
    render_s = time.perf_counter() - t0
    log(f"rendered {cfg.samples} near-goal images for the fine stage in {render_s:.0f} s")
    mean, scale = standardization(values, coarse.meta.angles)
    meta = replace(coarse.meta, fine_mean=mean, fine_scale=scale, **fine_region(task, coarse.meta, cfg.fine, values))
    net = network(meta, n_outputs(meta), cfg.fine, meta.fine_patch)
    losses = fit(net, np.ascontiguousarray(crop(meta, images)), encode(meta, values, fine=True), cfg, log, "fine: ")
    train_s = time.perf_counter() - t0 - render_s
    return Perception(meta, coarse.net, net), {"fine_losses": losses, "fine_render_seconds": render_s,
                                               "fine_train_seconds": train_s}


def first_stage(model: Perception) -> Perception:
    """``model`` without its fine stage."""
    return Perception(replace(model.meta, fine_crop=(), fine_members=1, fine_more_mean=(), fine_more_scale=()), model.net)


def with_member(model: Perception, member: Perception) -> Perception:
    """``model`` with ``member``'s fine stage (one network, trained on the same first stage and
    crop) added as its next fine stage member."""
    a, b = model.meta, member.meta
    if not a.fine_crop or b.fine_crop != a.fine_crop or b.fine_patch != a.fine_patch or b.fine_members != 1:
        raise TwinloopError("a fine stage member must be one network reading the model's own fine crop")
    meta = replace(a, fine_members=a.fine_members + 1, fine_more_mean=a.fine_more_mean + b.fine_mean,
                   fine_more_scale=a.fine_more_scale + b.fine_scale)
    return Perception(meta, model.net, [*model.fine_nets, member.fine_net])


def train_members(cfg: PerceptionConfig, task, model: Perception, log: Callable[[str], None]) -> tuple[Perception, dict]:
    """``model``'s fine stage (trained here if it has none) completed to ``cfg.members`` members,
    member ``i`` trained with seed ``cfg.seed + i``."""
    rep: dict = {}
    if model.fine_net is None:
        model, rep = train_fine(cfg, task, model, log)
    more, first = [], first_stage(model)
    for i in range(model.meta.fine_members, cfg.members):
        log(f"fine stage member {i} (seed {cfg.seed + i})")
        member, member_rep = train_fine(replace(cfg, seed=cfg.seed + i), task, first, log)
        model = with_member(model, member)
        more.append({"member": i, "seed": cfg.seed + i, **member_rep})
    return model, {**rep, **({"fine_more": more} if more else {})}


def train_perception(cfg: PerceptionConfig, log: Callable[[str], None] = print) -> tuple[Perception, dict]:
    """Render, train, and return the model with a report (losses, seconds): its first stage
    (or ``cfg.coarse``'s), then its fine stage if ``cfg.fine`` (its ``cfg.members`` members)."""
    import torch

    task = make_task(cfg.task)
    torch.set_num_threads(cfg.threads)
    if cfg.coarse is None:
        model, rep = train_coarse(cfg, task, log)
    else:
        model, rep = load_perception(cfg.coarse, task=cfg.task), {"coarse": str(cfg.coarse)}
        if model.meta.size != cfg.size:
            raise TwinloopError(f"coarse checkpoint {cfg.coarse!r} reads {model.meta.size} px images, not {cfg.size}")
        keep = bool(model.meta.fine_crop) and model.meta.fine_crop[2] == cfg.fine and model.meta.fine_members < cfg.members
        if keep:
            log(f"kept the coarse checkpoint's {model.meta.fine_members} fine stage member(s)")
        else:
            model = first_stage(model)
    if cfg.fine:
        model, fine_rep = train_members(cfg, task, model, log)
        rep = {**rep, **fine_rep}
    return model, rep


def point_groups(names: tuple[str, ...], angles: tuple[bool, ...]) -> list[list[int]]:
    """Keypoint entries grouped into points: consecutive ``<p>_x, <p>_y[, <p>_z]`` positions."""
    groups: list[list[int]] = []
    for i, (name, angle) in enumerate(zip(names, angles, strict=True)):
        stem, _, axis = name.rpartition("_")
        if angle or axis not in ("x", "y", "z"):
            continue
        prev = groups[-1] if groups else None
        if prev is not None and axis != "x" and names[prev[-1]].rpartition("_")[0] == stem:
            prev.append(i)
        else:
            groups.append([i])
    return groups


def errors(model: Perception, pred: np.ndarray, truth: np.ndarray) -> dict:
    """``(N, k)`` predicted and true keypoints -> point position error (mm; several points:
    their mean per frame) and angle error (degrees), each mean and 95th percentile."""
    out: dict = {}
    groups = point_groups(model.meta.keypoints, model.meta.angles)
    if groups:
        err = np.mean([np.linalg.norm(pred[:, g] - truth[:, g], axis=1) for g in groups], axis=0)
        out.update(position_error_mean_mm=1000 * float(err.mean()), position_error_p95_mm=1000 * float(np.percentile(err, 95)))
    ang = [i for i, a in enumerate(model.meta.angles) if a]
    if ang:
        d = np.abs(np.angle(np.exp(1j * (pred[:, ang] - truth[:, ang])))).ravel()
        out.update(angle_error_mean_deg=float(np.degrees(d.mean())), angle_error_p95_deg=float(np.degrees(np.percentile(d, 95))))
    return out


def held_out_renders(task, model: Perception, severity: int, worlds, states: int, seed: int,
                     near_goal: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Images and true keypoints of ``states`` states in each world of ``worlds`` under its
    appearance (``severity``), the states drawn near the goal with probability ``near_goal``."""
    truth, images = [], []
    for w in worlds:
        look = np.random.default_rng([int(w), 7])
        rng = np.random.default_rng([seed, 13, int(w)] + ([17] if near_goal else []))
        im, v = render_dataset(task, states, rng, model.meta.size, lambda: float(severity), look_rng=look,
                               near_goal=near_goal)
        images.append(im), truth.append(v)
    return np.concatenate(images), np.concatenate(truth)


def ms_per_frame(model: Perception, images: np.ndarray, frames: int = 200) -> float:
    """Milliseconds per frame of ``model.predict`` on up to ``frames`` of ``images``, one at a time."""
    model.predict({model.meta.camera: images[0]})  # warm-up
    n = min(frames, len(images))
    t0 = time.perf_counter()
    for i in range(n):
        model.predict({model.meta.camera: images[i]})
    return 1000 * (time.perf_counter() - t0) / n


def evaluate_perception(model: Perception, severity: int, worlds, states: int, seed: int = 0) -> dict:
    """Errors (:func:`errors`) of ``model`` on renders under the appearance of camera worlds
    (``severity``, each world seed in ``worlds``) against the true keypoints: ``states`` states
    each from the task's reset distribution and, where the task draws them, as many near the
    goal (``near_goal``); and milliseconds per frame (one image at a time on one CPU thread,
    the model's forward pass)."""
    import torch

    task = make_task(model.meta.task)
    images, truth = held_out_renders(task, model, severity, worlds, states, seed)
    out: dict = {"task": task.name, "severity": int(severity), "worlds": [int(w) for w in worlds],
                 "frames": int(len(images)), "image_size": model.meta.size,
                 **errors(model, model.predict_batch(images), truth)}
    if task.near_goal_state(np.random.default_rng(0)) is not None:
        near, near_truth = held_out_renders(task, model, severity, worlds, states, seed, near_goal=1.0)
        out["near_goal"] = {"frames": int(len(near)), **errors(model, model.predict_batch(near), near_truth)}
    torch.set_num_threads(1)  # one frame's small convolutions: threads would only wait on each other
    out["ms_per_frame"] = ms_per_frame(model, images)
    if "near_goal" in out:  # where a fine stage reads a second crop
        out["near_goal"]["ms_per_frame"] = ms_per_frame(model, near)
    out["threads"] = 1
    return out
