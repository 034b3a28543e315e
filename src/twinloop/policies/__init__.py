"""Base proposers: scripted heuristics and policies distilled from refined actions."""

from twinloop.policies.scripted import (
    ScriptedBlockPush,
    ScriptedConfig,
    ScriptedPushT,
    make_scripted,
)

__all__ = ["ScriptedBlockPush", "ScriptedConfig", "ScriptedPushT", "make_scripted"]
