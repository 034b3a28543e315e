"""Worlds: what the robot really acts in (a driver, a gymnasium env, or a stand-in)."""

from twinloop.worlds.base import SimWorld, World

__all__ = ["SimWorld", "World"]
