"""A world distribution: each episode in its own world, drawn from the episode's seed.

One shifted world is one draw of hidden physics: a run of 20 episodes in it measures a
controller in that world, and a lucky or unlucky draw moves every episode together.
``PerEpisodeWorld(make)`` measures over the distribution instead: ``reset(seed)`` builds
``make(seed)`` and resets it with the same seed, so an episode's world seed *is* its episode
seed. Two controllers run on the same episode seeds (base and refined in ``run_comparison``)
meet the same world on each episode, and the same seeds give the same worlds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.worlds.base import World


class PerEpisodeWorld(World):
    """Each episode in the world ``make(episode seed)``.

    Args:
        make: ``make(world_seed) -> World``: worlds of one kind (one task, one period) whose
            hidden physics the seed draws.
        first: world seed of the world held before the first reset (it answers ``period``,
            ``model`` and ``describe`` until then): the first episode's seed.

    Attributes:
        world: the current episode's world.
        seed: its world seed.
    """

    def __init__(self, make: Callable[[int], World], first: int = 0):
        self.make = make
        self.seed = number(first, "world seed", low=0, integer=True)
        self.world = make(self.seed)
        self.task, self.period, self.name = self.world.task, self.world.period, self.world.name

    @property
    def model(self):
        """The current world's model (a video replays an episode in its own world)."""
        return self.world.model

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        if seed != self.seed:
            world = self.make(seed)
            if getattr(world.task, "name", None) != getattr(self.task, "name", None) or world.model.nq != self.world.model.nq:
                raise TwinloopError(f"world seed {seed}: its world is of another task or scene "
                                    f"({getattr(world.task, 'name', '?')}, nq={world.model.nq}) than the first world's "
                                    f"({getattr(self.task, 'name', '?')}, nq={self.world.model.nq})")
            if world.period != self.period:
                raise TwinloopError(f"world seed {seed}: its period {world.period:g} s differs from the first "
                                    f"world's {self.period:g} s")
            self.world.close()
            self.world, self.seed = world, seed
        return self.world.reset(seed)

    def step(self, action):
        return self.world.step(action)

    def info(self) -> dict:
        return self.world.info()

    def describe(self) -> dict:
        """What every episode's world shares: the current one's description without its draw
        (``params``, ``seed``: an episode's are in its ``world_seed`` / ``world_params``)."""
        d = self.world.describe()
        return {**{k: v for k, v in d.items() if k not in ("params", "seed")}, "world_per_episode": True}

    def drawn(self) -> dict:
        """The current world's draw: ``world_seed`` and its hidden parameter values (if it says)."""
        return {"world_seed": self.seed, "world_params": self.world.describe().get("params", {})}

    def close(self) -> None:
        self.world.close()
