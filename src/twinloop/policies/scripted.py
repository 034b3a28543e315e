"""The scripted base proposers, which live beside their tasks (:mod:`twinloop.tasks.scripted`)."""

from twinloop.tasks.scripted import PointPusher, ScriptedConfig, arc, pusher_excitation, walk

__all__ = ["PointPusher", "ScriptedConfig", "arc", "pusher_excitation", "walk"]
