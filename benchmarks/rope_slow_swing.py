"""rope-shape whose scripted base swings the free end over in 1.6 s instead of 0.8 s: a task file
for ``twinloop run --task benchmarks/rope_slow_swing.py:RopeSlowSwing`` (the rule
``results/tables/rope-slow-swing.rule.txt`` says why and how it is judged)."""

from dataclasses import replace

from twinloop.tasks.rope_shape import QUICK_SWING, RopeShape


class RopeSlowSwing(RopeShape):
    """rope-shape with the 0.8 s swing's ``arc_time`` 1.6 s (the same physics, cost and success)."""

    swing = replace(QUICK_SWING, arc_time=1.6)
