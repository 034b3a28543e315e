"""The perception network: one RGB image -> a task's keypoints, and its checkpoint.

Targets are the task's seen keypoints (``Task.seen.keypoints``): a position is learned
standardized (its training mean and spread), an angle as its cosine and sine (no wrap). The
network is a small CNN with two coordinate channels, ending in heatmaps whose expected
image positions (a spatial soft-argmax, as in deep visuomotor policies) a two-layer head reads.

A model may have a second, **fine** stage: the same architecture reading a fixed square crop of
the image (around the task's :meth:`~twinloop.tasks.Task.near_goal_focus`) at a finer patch
size, trained on near-goal states only; it replaces the first stage's keypoints where those lie
well inside the near-goal region and is blended into them towards its edge (:func:`fine_weight`).
The fine stage may be an ensemble: several networks (its *members*) reading the same crop, each
trained on its own renders from its own initialization, their estimates averaged
(:func:`average`).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.threads import torch_threads


@dataclass(frozen=True)
class Meta:
    """What a checkpoint says about its network.

    Attributes:
        task: the task it was trained for.
        keypoints: the observation entries it predicts (``Task.seen.keypoints``).
        angles: which of them are angles (learned as cosine and sine).
        camera: the camera whose images it reads.
        size: image side (px).
        mean, scale: the standardization of the position targets (one per keypoint; angles 0, 1).
        width: channels of the first convolution.
        seed: the training seed.
        patch: side (px) of the first convolution's patches.
        fine_crop: ``(row, column, side)`` px of the fine stage's crop (empty: no fine stage).
        fine_patch: its patch side (px).
        fine_mean, fine_scale: its standardization of the position targets.
        fine_centre: ``(n_keypoints,)`` the centre of the region where it is used (the goal).
        fine_gate: ``(position m, angle rad)``: the region's half-extent; the fine stage is used
            alone inside :data:`FINE_INNER` of it, blended linearly into the first stage at its edge.
        fine_members: how many networks the fine stage averages (1: one network).
        fine_more_mean, fine_more_scale: the standardization of members 1, 2, ... (each its own
            training renders'), concatenated (``fine_mean``, ``fine_scale``: member 0's).
    """

    task: str
    keypoints: tuple[str, ...]
    angles: tuple[bool, ...]
    camera: str
    size: int
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    width: int = 16
    seed: int = 0
    patch: int = 4
    fine_crop: tuple[int, ...] = ()
    fine_patch: int = 2
    fine_mean: tuple[float, ...] = ()
    fine_scale: tuple[float, ...] = ()
    fine_centre: tuple[float, ...] = ()
    fine_gate: tuple[float, ...] = ()
    fine_members: int = 1
    fine_more_mean: tuple[float, ...] = ()
    fine_more_scale: tuple[float, ...] = ()


#: learned keypoint heatmaps of the network
HEATMAPS = 16
#: the fraction of the fine stage's region (:attr:`Meta.fine_gate`) where it is used alone
FINE_INNER = 0.75
#: test-time shifts ``(rows, columns)`` px of an image, in the order :attr:`Perception.shifts`
#: takes them: a 1 px move changes which pixels each of the networks' patches holds
SHIFTS = ((0, 0), (1, 1), (1, 0), (0, 1))


def network(meta: Meta, out: int, size: int | None = None, patch: int | None = None):
    """The CNN: ``(B, 3, S, S)`` uint8-scaled images -> ``(B, out)`` (``S``: ``size``, default
    ``meta.size``; patches of ``patch`` px, default ``meta.patch``)."""
    import torch
    from torch import nn

    w, size, patch = meta.width, size or meta.size, patch or meta.patch
    if size % patch:
        raise TwinloopError(f"perception network: image side {size} px is no multiple of its patch side {patch} px")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            # a 4x4 patch embedding, 3x3 convolutions at that resolution, then one heatmap per
            # learned keypoint whose expected image position (a spatial soft-argmax) the head reads
            self.features = nn.Sequential(
                nn.Conv2d(5, w, patch, stride=patch), nn.ReLU(),
                nn.Conv2d(w, w, 3, padding=1), nn.ReLU(),
                nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(),
                nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(),
                nn.Conv2d(2 * w, HEATMAPS, 1))
            self.temperature = nn.Parameter(torch.tensor(1.0))
            self.head = nn.Sequential(nn.Linear(2 * HEATMAPS, 128), nn.ReLU(), nn.Linear(128, out))
            self.skip = nn.Linear(2 * HEATMAPS, out)
            lin = torch.linspace(-1.0, 1.0, size)
            self.register_buffer("coords", torch.stack(torch.meshgrid(lin, lin, indexing="ij"))[None], persistent=False)
            g = torch.linspace(-1.0, 1.0, size // patch)
            self.register_buffer("grid", torch.stack(torch.meshgrid(g, g, indexing="ij")).reshape(2, -1), persistent=False)

        def forward(self, x):
            # each image standardized per channel: robust to lighting, and the block's few
            # pixels stand out of the table as they would not in raw 0..255 intensities
            x = (x - x.mean(dim=(2, 3), keepdim=True)) / (x.std(dim=(2, 3), keepdim=True) + 1.0)
            x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], dim=1)
            h = self.features(x).flatten(2) * self.temperature  # (B, K, HW)
            p = torch.softmax(h, dim=-1)
            points = torch.einsum("bkn,cn->bkc", p, self.grid).flatten(1)  # (B, 2K) expected positions
            return self.head(points) + self.skip(points)

    return Net()


def n_outputs(meta: Meta) -> int:
    return sum(2 if a else 1 for a in meta.angles)


def standardization(meta: Meta, fine: bool = False, member: int = 0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The position targets' ``(mean, scale)``: the first stage's, or with ``fine`` the fine
    stage member ``member``'s."""
    if not fine:
        return meta.mean, meta.scale
    if member == 0:
        return meta.fine_mean, meta.fine_scale
    if not 0 < member < meta.fine_members:
        raise TwinloopError(f"perception model: no fine stage member {member} (it has {meta.fine_members})")
    k = len(meta.keypoints)
    part = slice((member - 1) * k, member * k)
    return meta.fine_more_mean[part], meta.fine_more_scale[part]


def encode(meta: Meta, values: np.ndarray, fine: bool = False, member: int = 0) -> np.ndarray:
    """``(N, n_keypoints)`` keypoint values -> ``(N, n_outputs)`` network targets (of the fine
    stage's member ``member`` with ``fine``)."""
    mean, scale = standardization(meta, fine, member)
    cols = []
    for i, angle in enumerate(meta.angles):
        v = values[:, i]
        cols += [np.cos(v), np.sin(v)] if angle else [(v - mean[i]) / scale[i]]
    return np.stack(cols, axis=1).astype(np.float32)


def decode(meta: Meta, out: np.ndarray, fine: bool = False, member: int = 0) -> np.ndarray:
    """``(N, n_outputs)`` network outputs -> ``(N, n_keypoints)`` keypoint values (of the fine
    stage's member ``member`` with ``fine``)."""
    mean, scale = standardization(meta, fine, member)
    cols, j = [], 0
    for i, angle in enumerate(meta.angles):
        if angle:
            cols.append(np.arctan2(out[:, j + 1], out[:, j]))
            j += 2
        else:
            cols.append(out[:, j] * scale[i] + mean[i])
            j += 1
    return np.stack(cols, axis=1)


def crop(meta: Meta, images: np.ndarray) -> np.ndarray:
    """``(N, S, S, 3)`` images -> ``(N, C, C, 3)``, the fine stage's crop of each."""
    r, c, side = meta.fine_crop
    return images[:, r:r + side, c:c + side]


def fine_weight(meta: Meta, keypoints: np.ndarray) -> np.ndarray:
    """``(N,)`` the fine stage's share for first-stage ``(N, n_keypoints)`` keypoints: 1 inside
    :data:`FINE_INNER` of its region (:attr:`Meta.fine_gate` about :attr:`Meta.fine_centre`),
    falling linearly to 0 at its edge."""
    d = keypoints - np.asarray(meta.fine_centre)
    ang = np.array(meta.angles)
    d[:, ang] = np.angle(np.exp(1j * d[:, ang]))
    far = np.zeros(len(d))
    if (~ang).any():
        far = np.linalg.norm(d[:, ~ang], axis=1) / meta.fine_gate[0]
    if ang.any():
        far = np.maximum(far, np.abs(d[:, ang]).max(axis=1) / meta.fine_gate[1])
    return np.clip((1.0 - far) / (1.0 - FINE_INNER), 0.0, 1.0)


def average(meta: Meta, estimates: np.ndarray) -> np.ndarray:
    """``(M, N, n_keypoints)`` estimates of ``M`` networks -> ``(N, n_keypoints)``: positions
    their mean, angles their circular mean (the direction of the mean unit vector)."""
    est = np.asarray(estimates, dtype=float)
    out = est.mean(axis=0)
    ang = np.array(meta.angles)
    if ang.any():
        out[:, ang] = np.angle(np.exp(1j * est[:, :, ang]).mean(axis=0))
    return out


def shifted(images: np.ndarray, shift: tuple[int, int]) -> np.ndarray:
    """``(N, S, S, 3)`` images moved by ``shift`` px (rows, columns; the content moves up and
    left), the edge pixels repeated where the image is moved in."""
    dr, dc = shift
    if not (dr or dc):
        return images
    h, w = images.shape[1:3]
    p = max(abs(dr), abs(dc))
    x = np.pad(images, ((0, 0), (p, p), (p, p), (0, 0)), mode="edge")
    return x[:, p + dr : p + dr + h, p + dc : p + dc + w]


def blend(meta: Meta, coarse: np.ndarray, fine: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``coarse + w (fine - coarse)`` per keypoint, angles along their shorter arc."""
    d = fine - coarse
    ang = np.array(meta.angles)
    d[:, ang] = np.angle(np.exp(1j * d[:, ang]))
    out = coarse + w[:, None] * d
    out[:, ang] = np.angle(np.exp(1j * out[:, ang]))
    return out


class Perception:
    """A trained network with its :class:`Meta` (and its fine stage's network, or its members'
    networks in order, where ``meta.fine_crop`` names one): ``predict(images) -> (n_keypoints,)``.

    ``shifts`` (1 to 4): how many copies of each image it reads, the image itself and the image
    moved by the next of :data:`SHIFTS` (1 px in rows and columns, in rows, in columns), every
    copy read by the whole model and the estimates averaged (:func:`average`): test-time shift
    averaging. The networks read patches (4 px, a fine stage 2 px); a moved copy puts other
    pixels in each patch, and, trained under camera aim errors of millimetres, they place the
    block by what they see around it rather than by the image frame, so each copy is read as the
    same scene with other patch errors, which partly cancel. Costs ``shifts`` forward passes.
    """

    def __init__(self, meta: Meta, net, fine_net=None, shifts: int = 1):
        nets = () if fine_net is None else tuple(fine_net) if isinstance(fine_net, list | tuple) else (fine_net,)
        if bool(meta.fine_crop) != bool(nets):
            raise TwinloopError("a perception model's fine stage needs both its crop (Meta.fine_crop) and its network")
        k = len(meta.keypoints) * (meta.fine_members - 1)
        if nets and (len(nets) != meta.fine_members or len(meta.fine_more_mean) != k or len(meta.fine_more_scale) != k):
            raise TwinloopError(f"a perception model's fine stage has {len(nets)} network(s) for {meta.fine_members} "
                                "member(s) (Meta.fine_members) and needs each extra member's standardization")
        self.shifts = number(shifts, "perception shifts", low=1, high=len(SHIFTS), integer=True)
        # PyTorch threads of a forward pass: one, as on a busy 2-core machine two wait on each
        # other (four shifted copies beside a busy process: 1.9 against 6.3 ms a frame, on an
        # idle machine 1.9 against 1.4; benchmarks/perception_threads.json)
        self.threads = 1
        self.meta, self.net = meta, net.eval()
        self.fine_nets = tuple(n.eval() for n in nets)
        self.fine_net = self.fine_nets[0] if nets else None

    def fine_estimates(self, images: np.ndarray) -> np.ndarray:
        """``(N, S, S, 3)`` uint8 images -> ``(N, n_keypoints)``: the fine stage's keypoints from
        their crops (its members' average)."""
        x = crop(self.meta, np.asarray(images))
        each = [decode(self.meta, self._run(n, x), fine=True, member=m) for m, n in enumerate(self.fine_nets)]
        return each[0] if len(each) == 1 else average(self.meta, each)

    def _run(self, net, x: np.ndarray):
        import torch

        with torch.inference_mode(), torch_threads(self.threads):
            return net(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float()).numpy().astype(float)

    def predict_batch(self, images: np.ndarray) -> np.ndarray:
        """``(N, S, S, 3)`` uint8 images -> ``(N, n_keypoints)`` keypoints (m, rad)."""
        x = np.asarray(images)
        if x.ndim != 4 or x.shape[1:] != (self.meta.size, self.meta.size, 3):
            raise TwinloopError(f"perception model for {self.meta.task!r} reads ({self.meta.size}, {self.meta.size}, 3) "
                                f"images, got {x.shape[1:]}")
        if self.shifts > 1:
            each = self._read(np.concatenate([shifted(x, d) for d in SHIFTS[: self.shifts]]))
            return average(self.meta, each.reshape(self.shifts, len(x), -1))
        return self._read(x)

    def _read(self, x: np.ndarray) -> np.ndarray:
        """``(N, n_keypoints)``: the first stage's keypoints, the fine stage's blended in."""
        kp = decode(self.meta, self._run(self.net, x))
        if self.fine_net is None:
            return kp
        w = fine_weight(self.meta, kp)
        near = w > 0
        if near.any():
            kp[near] = blend(self.meta, kp[near], self.fine_estimates(x[near]), w[near])
        return kp

    def predict(self, images: dict) -> np.ndarray:
        """``{camera: (S, S, 3) uint8}`` -> ``(n_keypoints,)`` keypoints from this model's camera."""
        if self.meta.camera not in images:
            raise TwinloopError(f"perception model reads camera {self.meta.camera!r}; the world gives {sorted(images)}")
        return self.predict_batch(images[self.meta.camera][None])[0]

    def save(self, path) -> str:
        """Write the checkpoint; returns its SHA-256."""
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = {"meta": asdict(self.meta), "state_dict": self.net.state_dict()}
        if self.fine_net is not None:
            blob["fine_state_dict"] = self.fine_net.state_dict()
        if len(self.fine_nets) > 1:
            blob["fine_more_state_dicts"] = [n.state_dict() for n in self.fine_nets[1:]]
        torch.save(blob, path)
        return hashlib.sha256(path.read_bytes()).hexdigest()


#: the shipped checkpoints, each ``NAME.pt`` beside its report ``NAME.json`` (its SHA-256, its evaluation)
SHIPPED = Path(__file__).parent / "models"


def shipped(name: str) -> Path | None:
    """The shipped checkpoint ``name`` (a task's name), its SHA-256 checked; ``None`` if none is."""
    import json

    p = SHIPPED / f"{name}.pt"
    if "/" in name or not p.is_file():
        return None
    want = json.loads(p.with_suffix(".json").read_text())["sha256"]
    if hashlib.sha256(p.read_bytes()).hexdigest() != want:
        raise TwinloopError(f"shipped perception checkpoint {name!r} does not match its SHA-256 ({want[:12]}...)")
    return p


def load_perception(path, task: str | None = None, shifts: int = 1) -> Perception:
    """A checkpoint written by :meth:`Perception.save`, or a shipped one by name (``push-t``);
    refused for another ``task``. ``shifts``: :attr:`Perception.shifts`."""
    import torch

    p = Path(path)
    if not p.is_file():
        p = shipped(str(path))
    if p is None:
        have = sorted(f.stem for f in SHIPPED.glob("*.pt"))
        raise TwinloopError(f"perception checkpoint {str(path)!r} not found: give a file (`twinloop perception train` "
                            f"writes one) or a shipped model ({', '.join(have) or 'none'})")
    try:
        blob = torch.load(p, map_location="cpu", weights_only=True)
        d = blob["meta"]
        meta = Meta(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
        net = network(meta, n_outputs(meta))
        net.load_state_dict(blob["state_dict"])
        fine = None
        if meta.fine_crop:
            fine = []
            for sd in [blob["fine_state_dict"], *blob.get("fine_more_state_dicts", [])]:
                fine.append(network(meta, n_outputs(meta), meta.fine_crop[2], meta.fine_patch))
                fine[-1].load_state_dict(sd)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise TwinloopError(f"{str(path)!r} is no perception checkpoint: {exc}") from None
    if task is not None and meta.task != task:
        raise TwinloopError(f"perception checkpoint {str(path)!r} is for task {meta.task!r}, not {task!r}")
    return Perception(meta, net, fine, shifts)
