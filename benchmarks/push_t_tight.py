"""push-t with its terminal cost terms (final_position, final_yaw) four times as strong: a task
file for ``twinloop run --task benchmarks/push_t_tight.py:PushTTight4`` (the rule
``results/tables/push-t-rgb-tight.rule.txt`` chose the factor on its screen)."""

from twinloop.tasks.push_t import PushT


class PushTTight4(PushT):
    """push-t whose terminal terms weigh 12 instead of 3: the controller keeps reducing a
    millimetre of error it would otherwise leave."""

    FACTOR = 4.0

    def __init__(self, **kw):
        w = PushT.WEIGHTS
        super().__init__(weights={"final_position": w["final_position"] * self.FACTOR,
                                  "final_yaw": w["final_yaw"] * self.FACTOR}, **kw)
