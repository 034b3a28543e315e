"""A policy to evaluate, as one small spec: a base proposer, optionally refined in a twin.

Text form (what ``twinloop evaluate --policy`` takes)::

    proposer[+optimizer][@key=value,key=value,...]

    scripted                        the task's scripted proposer alone
    scripted@noise=0.1              ... with seeded action noise (std 10% of the half-range)
    scripted+mppi@k=16              refined by MPPI, K = 16, in the nominal MuJoCo twin
    none+cem@k=32,iterations=2      refinement from scratch, two CEM iterations per tick
    distilled@checkpoint=p.pt       a distilled policy (``twinloop distill``) alone
    scripted+mppi@k=16,backend=hybrid,twin=h.pt   refined in a learned (hybrid) twin

Keys: ``k`` (= ``num_samples``) and every other :class:`~twinloop.control.RefinerConfig` field
configure the refiner; ``backend`` and ``twin`` (a saved learned twin) choose the refiner's
twin; ``name`` labels the policy; the rest (``noise``, ``checkpoint``) go to the proposer.
The refiner always plans in its own twin: evaluating the policy in another world (the real
one, a calibrated twin) never changes the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.errors import TwinloopError, choose
from twinloop.plan import OPTIMIZER_NAMES, make_optimizer
from twinloop.policies import check_proposer, make_proposer
from twinloop.tasks import task_defaults
from twinloop.twin import BACKENDS, make_twin

_REFINER_KEYS = {f.name: f.type for f in fields(RefinerConfig)}


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class PolicySpec:
    """A base proposer, optionally refined.

    Attributes:
        proposer: a registered proposer (``twinloop.policies.PROPOSERS``).
        optimizer: a registered optimizer, or ``None`` for the proposer alone.
        refiner: the refiner's knobs (used when ``optimizer`` is set).
        proposer_options: ``(key, value)`` pairs for the proposer (``noise``, ``checkpoint``).
        backend: the refiner's twin backend (``twinloop.twin.BACKENDS``).
        twin: a saved twin for backends that load one (``learned``, ``hybrid``).
        name: a label (default: the spec's text).
    """

    proposer: str = "scripted"
    optimizer: str | None = None
    refiner: RefinerConfig = field(default_factory=RefinerConfig)
    proposer_options: tuple[tuple[str, object], ...] = ()
    backend: str = "mujoco"
    twin: str | None = None
    name: str | None = None

    def __post_init__(self):
        check_proposer(self.proposer)
        if self.optimizer is not None:
            choose("optimizer", self.optimizer, OPTIMIZER_NAMES)
        choose("backend", self.backend, tuple(BACKENDS))
        if self.optimizer is None and self.proposer == "none":
            raise TwinloopError("policy 'none' without an optimizer does nothing: add +mppi (or another optimizer)")

    @classmethod
    def parse(cls, text: str) -> PolicySpec:
        """A spec from its text form (see the module docstring)."""
        if not isinstance(text, str) or not text.strip():
            raise TwinloopError(f"policy spec must be a non-empty string, got {text!r}")
        head, _, tail = text.strip().partition("@")
        proposer, _, optimizer = head.partition("+")
        refiner, options, kw = {}, [], {}
        for item in (t.strip() for t in tail.split(",") if t.strip()):
            key, sep, value = (s.strip() for s in item.partition("="))
            if not sep or not key:
                raise TwinloopError(f"policy {text!r}: options look like key=value, got {item!r}")
            key = "num_samples" if key == "k" else key
            if key in _REFINER_KEYS:
                refiner[key] = _value(value)
            elif key in ("backend", "twin", "name"):
                kw[key] = value
            else:
                options.append((key, _value(value)))
        try:
            rcfg = RefinerConfig(**refiner)
        except TypeError as exc:  # pragma: no cover - keys are checked above
            raise TwinloopError(f"policy {text!r}: {exc}") from exc
        return cls(proposer.strip(), optimizer.strip() or None, rcfg, tuple(options), **kw)

    @property
    def label(self) -> str:
        """The name, or the canonical text form."""
        if self.name:
            return self.name
        head = self.proposer + (f"+{self.optimizer}" if self.optimizer else "")
        opts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.proposer_options]
        if self.optimizer:
            default = RefinerConfig()
            opts.append(f"k={self.refiner.num_samples}")
            opts += [f"{k}={getattr(self.refiner, k)}" for k in _REFINER_KEYS
                     if k not in ("num_samples", "seed") and getattr(self.refiner, k) != getattr(default, k)]
            if self.backend != "mujoco":
                opts.append(f"backend={self.backend}")
        return head + ("@" + ",".join(opts) if opts else "")

    @property
    def refined(self) -> bool:
        return self.optimizer is not None

    def make_refiner(self, task, twin) -> Refiner:
        """The refiner this spec plans with in ``twin``: its optimizer (``mppi`` for a spec
        without one) at ``task``'s sampling noise (its ``planner.noise`` default,
        :attr:`Task.defaults <twinloop.tasks.Task.defaults>`)."""
        noise = task_defaults(task).get("planner.noise")
        return Refiner(task, twin, make_optimizer(self.optimizer or "mppi", noise=noise), self.refiner)


def policy_controller(task, spec: PolicySpec) -> Controller:
    """The controller that runs ``spec`` for ``task`` (a fresh proposer, twin and refiner)."""
    proposer = make_proposer(task, spec.proposer, **dict(spec.proposer_options))
    kw = {"checkpoint": spec.twin} if spec.twin else {}
    twin = make_twin(spec.backend, task.model, task.param_space(), **kw)
    return Controller(spec.make_refiner(task, twin), proposer, refine=spec.refined)


__all__ = ["PolicySpec", "policy_controller"]
