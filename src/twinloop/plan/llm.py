"""A language-model optimizer: a chat model reads the failed rollouts and proposes plans.

Sampling optimizers perturb the current plan; they rarely find one that differs in structure
(approach the block from another face, another contact, another order of moves).
``LLMGuided`` wraps a sampling optimizer (``llm+mppi``, ``llm+cem``, ...): ``init``, ``sample``
and ``update`` are the sampling optimizer's, and after ``update``, when the refiner has said
what the batch did (``OptState.feedback``: another iteration follows), it asks the model for
up to ``candidates`` plans and returns them as ``suggested`` knots. The refiner rolls them out
in the next batch beside the samples, and the sampling optimizer refines around whichever
wins. With one iteration per tick there is no next batch: use ``iterations >= 2``.

What is sent, and nothing else: the task's description, the action bounds and the knot
layout, the current plan and the base proposal, and for the best and the failed rollouts of the
batch (unstable ones first, then the costliest) their knots, cost, weighted cost terms,
failure flags (unstable; the task's own failure, e.g. toppled) and positions at every control
tick. The reply must be one JSON object ``{"analysis": str, "plans": [(N, nu) knots, ...]}``;
plans are clipped to the action bounds (``info["clipped"]`` counts the values clipped).

Any failure (timeout, no connection, an HTTP error left after the client's retries with
exponential backoff, which honour ``Retry-After``; malformed JSON; a reply out of schema)
leaves the tick to the sampling optimizer alone: no model plan joins the batch, no further
call is made in that tick, and ``info["fallback"]`` says why. Replies are cached by endpoint,
model and prompt for the life of the process, so re-running a seed (e.g. to render its video)
replays the same replies without calls.
Per tick, ``info`` counts ``calls``, ``cached`` replies, ``prompt_tokens``,
``completion_tokens``, ``seconds`` waited, ``plans`` suggested and values ``clipped``.

The endpoint is any OpenAI-compatible chat API, through the ``openai`` client
(``pip install 'twinloop[llm]'``). Base URL: ``LLMConfig.base_url``, else
``$TWINLOOP_LLM_BASE_URL``, else the client's default (``$OPENAI_BASE_URL``, else OpenAI's).
Model: ``LLMConfig.model``, else ``$TWINLOOP_LLM_MODEL``. Key: the environment variable
named by ``api_key_env`` (``OPENAI_API_KEY``); local servers need none.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from twinloop.errors import TwinloopError, choose
from twinloop.plan.base import Feedback, Optimizer, OptState

ENV_BASE_URL, ENV_MODEL = "TWINLOOP_LLM_BASE_URL", "TWINLOOP_LLM_MODEL"
_CACHE: OrderedDict[str, str] = OrderedDict()  # sha256 of (endpoint, model, format, messages) -> reply
RESPONSE_FORMATS = ("json_schema", "json_object", "none")
# the client would otherwise tell the endpoint this machine's OS, CPU and Python version
_PLATFORM_HEADERS = ("X-Stainless-OS", "X-Stainless-Arch", "X-Stainless-Runtime", "X-Stainless-Runtime-Version")

SYSTEM = (
    "You improve a robot's plan. A sampling optimizer rolled out candidate action sequences in a "
    "physics simulator; you see the best and the failed ones. Work out why the failed ones fail and "
    "propose plans that change the structure where needed (approach from another side, another "
    "contact, another order of moves), not only small perturbations of the current plan. A plan is "
    "{n} knots of {nu} actions at the given knot times, interpolated between knots and held per "
    "control tick. Reply with one JSON object only: "
    '{{"analysis": "<at most two sentences>", "plans": [<plan>, ...]}} with 1 to {m} plans, each a '
    "list of {n} knots, each knot a list of {nu} numbers within the action bounds."
)


@dataclass(frozen=True)
class LLMConfig:
    """The chat model and what is sent to it.

    Attributes:
        base_url: OpenAI-compatible API root, e.g. ``http://127.0.0.1:8000/v1``; ``None``:
            ``$TWINLOOP_LLM_BASE_URL``, else the client's default.
        model: model name; ``None``: ``$TWINLOOP_LLM_MODEL``.
        api_key_env: environment variable holding the key (never stored in a config).
        timeout: seconds per request.
        max_retries: retries of a timed-out, rate-limited (429) or failed (5xx) request,
            with exponential backoff or the server's ``Retry-After``.
        candidates: most plans taken from one reply.
        n_best, n_failed: rollouts summarized from each batch: the lowest-cost ones, and the
            unstable then costliest ones.
        max_calls: model calls per control tick.
        temperature: sampling temperature (0: the most repeatable replies).
        max_tokens: cap on the reply's tokens.
        response_format: ``json_schema`` (the server enforces the reply's schema),
            ``json_object`` or ``none`` (for servers that support neither).
        cache_size: replies kept, by prompt (shared by every endpoint in the process).
    """

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 30.0
    max_retries: int = 2
    candidates: int = 3
    n_best: int = 3
    n_failed: int = 3
    max_calls: int = 1
    temperature: float = 0.0
    max_tokens: int = 2048
    response_format: str = "json_schema"
    cache_size: int = 256

    def __post_init__(self):
        choose("response_format", self.response_format, RESPONSE_FORMATS)
        if not self.timeout > 0:
            raise TwinloopError(f"LLMConfig.timeout must be > 0 s, got {self.timeout}")
        for k in ("candidates", "max_calls", "max_tokens"):
            if getattr(self, k) < 1:
                raise TwinloopError(f"LLMConfig.{k} must be >= 1, got {getattr(self, k)}")
        for k in ("max_retries", "n_best", "n_failed", "cache_size"):
            if getattr(self, k) < 0:
                raise TwinloopError(f"LLMConfig.{k} must be >= 0, got {getattr(self, k)}")


class ModelUnusable(Exception):
    """The model gave no usable plans this time; the message is the recorded reason."""


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool


class ChatEndpoint:
    """An OpenAI-compatible chat endpoint: one request per new prompt (replies are cached)."""

    def __init__(self, config: LLMConfig):
        try:
            import openai
        except ImportError as exc:
            raise TwinloopError("the llm optimizer needs the openai client: pip install 'twinloop[llm]'") from exc
        self.config = config
        self.model = config.model or os.environ.get(ENV_MODEL)
        if not self.model:
            raise TwinloopError(f"the llm optimizer needs a model name: LLMConfig.model (--llm-model) or ${ENV_MODEL}")
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=config.base_url or os.environ.get(ENV_BASE_URL),
            api_key=os.environ.get(config.api_key_env) or "none", timeout=config.timeout,
            max_retries=config.max_retries, default_headers={h: openai.Omit() for h in _PLATFORM_HEADERS},
        )

    def ask(self, messages: list[dict], schema: dict) -> Reply:
        """The model's reply text to ``messages``; raises :class:`ModelUnusable` with the reason."""
        cfg, openai = self.config, self._openai
        where = [str(self.client.base_url), self.model, cfg.response_format]
        key = hashlib.sha256(json.dumps([*where, messages]).encode()).hexdigest()
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return Reply(_CACHE[key], 0, 0, cached=True)
        fmt = {"json_schema": {"type": "json_schema", "json_schema": {"name": "plans", "schema": schema}},
               "json_object": {"type": "json_object"}}.get(cfg.response_format)
        tries = f"after {cfg.max_retries} retries"
        try:
            resp = self.client.chat.completions.create(
                model=self.model, messages=messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                **({"response_format": fmt} if fmt else {}))
        except openai.APITimeoutError as exc:
            raise ModelUnusable(f"timeout: no reply within {cfg.timeout:g} s {tries}") from exc
        except openai.RateLimitError as exc:
            raise ModelUnusable(f"rate_limited: HTTP 429 {tries}") from exc
        except openai.APIStatusError as exc:
            raise ModelUnusable(f"http_error: HTTP {exc.status_code} {tries}") from exc
        except openai.APIConnectionError as exc:
            raise ModelUnusable(f"connection_error: {exc} {tries}") from exc
        except openai.OpenAIError as exc:
            raise ModelUnusable(f"bad_response: {type(exc).__name__}: {exc}") from exc
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise ModelUnusable("bad_response: not a chat completion") from exc
        if not text:
            raise ModelUnusable("empty_reply: the reply has no text")
        usage = resp.usage
        if cfg.cache_size:
            _CACHE[key] = text
            while len(_CACHE) > cfg.cache_size:
                _CACHE.popitem(last=False)
        return Reply(text, int(getattr(usage, "prompt_tokens", 0) or 0),
                     int(getattr(usage, "completion_tokens", 0) or 0), cached=False)


def _num(x):
    """Numbers rounded to 4 decimals (0.1 mm, 0.1 mrad) as JSON-ready lists; non-finite -> None."""
    a = np.round(np.asarray(x, dtype=float), 4) + 0.0  # + 0.0: no "-0.0" in the prompt
    return np.where(np.isfinite(a), a, None).tolist()


def build_messages(fb: Feedback, plan: np.ndarray, prior: np.ndarray | None, config: LLMConfig) -> list[dict]:
    """The chat messages for one batch: the task, the plan layout, the current ``plan (N, nu)``,
    the base proposal ``prior (N, nu)`` (or ``None``) and summaries of the best and failed
    rollouts. Nothing else goes in."""
    spec = fb.spec
    order = np.argsort(np.where(np.isfinite(fb.costs), fb.costs, np.inf), kind="stable")
    best = [int(k) for k in order[: config.n_best] if np.isfinite(fb.costs[k])]
    failed = [int(k) for k in order[::-1] if k not in best][: config.n_failed]
    terms = fb.cost_terms() if best or failed else {}

    def rollout(k: int) -> dict:
        failure = "" if fb.unstable[k] else next((f for f in map(fb.failure, fb.states[k]) if f), "")
        return {"cost": _num(fb.costs[k]), "unstable": bool(fb.unstable[k]), "failure": failure,
                "cost_terms": {name: _num(v[k]) for name, v in terms.items()},
                "knots": _num(fb.candidates[k]), "states": _num(fb.states[k])}

    body = {
        "task": fb.description,
        "actions": {"size": spec.nu, "low": _num(spec.low), "high": _num(spec.high)},
        "plan_layout": {"knots": spec.n_knots, "knot_times_s": _num(spec.knot_times), "interpolation": spec.kind,
                        "control_period_s": spec.control_period, "horizon_s": _num(spec.horizon)},
        "current_plan": _num(plan),
        "base_proposal": None if prior is None else _num(prior),
        "batch": {"rollouts": len(fb.costs), "unstable": int(fb.unstable.sum())},
        "state_names": list(fb.state_names),
        "state_times_s": _num(fb.times),
        "best_rollouts": [rollout(k) for k in best],
        "failed_rollouts": [rollout(k) for k in failed],
    }
    system = SYSTEM.format(n=spec.n_knots, nu=spec.nu, m=config.candidates)
    return [{"role": "system", "content": system},
            {"role": "user", "content": json.dumps(body, separators=(",", ":"))}]


def reply_schema(n_plans: int, n_knots: int, nu: int) -> dict:
    """JSON schema of a reply: ``{"analysis": str, "plans": 1..n_plans x n_knots x nu numbers}``."""

    def array(items: dict, lo: int, hi: int) -> dict:
        return {"type": "array", "items": items, "minItems": lo, "maxItems": hi}

    plans = array(array(array({"type": "number"}, nu, nu), n_knots, n_knots), 1, n_plans)
    return {"type": "object", "properties": {"analysis": {"type": "string"}, "plans": plans},
            "required": ["analysis", "plans"], "additionalProperties": False}


def _all_numbers(x) -> bool:
    if isinstance(x, list):
        return all(_all_numbers(v) for v in x)
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_plans(text: str, n_knots: int, nu: int) -> np.ndarray:
    """``(M, n_knots, nu)`` plans from a reply's text; raises :class:`ModelUnusable` saying why.

    A Markdown code fence around the JSON is tolerated; anything else off the schema is not.
    """
    t = text.strip()
    if t.startswith("```"):  # many chat models fence JSON even when told not to
        t = t.partition("\n")[2].rsplit("```", 1)[0]
    try:
        obj = json.loads(t, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ModelUnusable(f"malformed_json: {exc}") from exc
    plans = obj.get("plans") if isinstance(obj, dict) else None
    if not isinstance(plans, list) or not plans:
        raise ModelUnusable("out_of_schema: no non-empty 'plans' list in the reply object")
    if not _all_numbers(plans):
        raise ModelUnusable("out_of_schema: 'plans' holds something other than nested lists of numbers")
    try:
        a = np.array(plans, dtype=float)
    except ValueError as exc:
        raise ModelUnusable("out_of_schema: plans are ragged (knots or actions of different lengths)") from exc
    if a.ndim != 3 or a.shape[1:] != (n_knots, nu):
        raise ModelUnusable(f"out_of_schema: plans have shape {a.shape}, expected (M, {n_knots}, {nu})")
    if not np.isfinite(a).all():
        raise ModelUnusable("out_of_schema: plans hold numbers too large to represent")
    return a


class LLMGuided:
    """A sampling optimizer whose batches also hold a chat model's plans (see the module).

    Args:
        base: the sampling optimizer (its ``init``, ``sample`` and ``update`` are used as they are).
        config: the model and what is sent to it.
    """

    def __init__(self, base: Optimizer, config: LLMConfig | None = None):
        self.base, self.config = base, config or LLMConfig()
        self.name = f"llm+{base.name}"
        self.endpoint = ChatEndpoint(self.config)

    def init(self, warm, prior, low, high) -> OptState:
        info = {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0,
                "plans": 0, "clipped": 0, "fallback": ""}
        return self.base.init(warm, prior, low, high).with_(info=info)

    def sample(self, state, rng, n):
        return self.base.sample(state, rng, n)

    def update(self, state, candidates, costs):
        new = self.base.update(state, candidates, costs)
        info, fb = dict(state.info), state.feedback
        if fb is None or info["fallback"] or info["calls"] >= self.config.max_calls:
            return new
        info["calls"] += 1
        t0 = time.perf_counter()
        try:
            reply = self.endpoint.ask(build_messages(fb, new.mean, state.prior, self.config),
                                      reply_schema(self.config.candidates, fb.spec.n_knots, fb.spec.nu))
            info["cached"] += reply.cached
            info["prompt_tokens"] += reply.prompt_tokens
            info["completion_tokens"] += reply.completion_tokens
            plans = parse_plans(reply.text, fb.spec.n_knots, fb.spec.nu)[: self.config.candidates]
        except ModelUnusable as exc:
            info["fallback"] = str(exc)
            plans = None
        info["seconds"] += time.perf_counter() - t0
        if plans is None:
            return new.with_(info=info)
        info["plans"] += len(plans)
        info["clipped"] += int(((plans < state.low) | (plans > state.high)).sum())
        return new.with_(info=info, suggested=np.clip(plans, state.low, state.high))
