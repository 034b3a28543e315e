"""Worlds: what the robot really acts in (a driver, a gymnasium env, or a stand-in)."""

from twinloop.worlds.base import SimWorld, World
from twinloop.worlds.gym import GymWorld
from twinloop.worlds.shifted import ShiftedWorld, shifted_params

__all__ = ["GymWorld", "ShiftedWorld", "SimWorld", "World", "shifted_params"]
