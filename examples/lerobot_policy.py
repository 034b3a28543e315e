"""A policy written for LeRobot, refined in the twin; its episodes exported for LeRobot.

Any object with LeRobot's policy interface (``reset``, ``select_action``,
``predict_action_chunk``) becomes a twinloop proposer through ``LeRobotProposer``. Here a
small stand-in (it pushes toward the block, with sampling noise from torch's generator, as
LeRobot's diffusion policies draw theirs) runs alone and refined by MPPI in the push-t world;
the refined episodes are recorded and written as a LeRobot v3.0 dataset that lerobot 0.4's
``LeRobotDataset(repo_id, root=...)`` loads. With lerobot installed, pass a trained policy
instead, e.g. ``ACTPolicy.from_pretrained(path)`` with the pre/post-processors lerobot saved
beside it (``preprocess=``, ``postprocess=``).

    python examples/lerobot_policy.py            # needs torch: pip install 'twinloop[learn]'
"""

import tempfile

import torch

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.data import Dataset, export_lerobot
from twinloop.plan import make_optimizer
from twinloop.policies.lerobot import LeRobotProposer
from twinloop.run.experiment import run_episodes
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import make_world


class TowardTheBlock(torch.nn.Module):
    """LeRobot's policy interface: ``(1, 10)`` push-t state in, ``(1, 8, 2)`` chunk out."""

    def reset(self):
        pass  # a policy with queues (observation history, pending actions) clears them here

    @torch.no_grad()
    def predict_action_chunk(self, batch):
        state = batch["observation.state"]
        pusher, block = state[:, 0:2], state[:, 2:4]
        steps = torch.linspace(0.1, 0.8, 8)[None, :, None]
        return pusher[:, None] + steps * (block - pusher)[:, None] + 0.002 * torch.randn(1, 8, 2)

    @torch.no_grad()
    def select_action(self, batch):
        return self.predict_action_chunk(batch)[:, 0]


task = make_task("push-t")
world = make_world(task, "shifted", severity=2, seed=0)
twin = make_twin("mujoco", task.model, task.param_space(), timestep=0.01)
refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=32, horizon=0.5))
proposer = LeRobotProposer(task, TowardTheBlock())

out = tempfile.mkdtemp(prefix="twinloop-lerobot-")
dataset = Dataset.create(f"{out}/episodes", {"fps": 1 / task.control_period, "task": task.name,
                                             "obs_names": list(task.obs_names)})
for name, controller in (("policy alone", Controller(refiner, proposer, refine=False)),
                         ("policy + refinement", Controller(refiner, proposer))):
    ds = dataset if name == "policy + refinement" else None
    results = run_episodes(world, controller, seeds=[0, 1], max_ticks=40, dataset=ds)
    print(f"{name:>20}: final error {[round(r.final_error, 3) for r in results]} m after 40 ticks")

root = export_lerobot(dataset, f"{out}/lerobot")
print(f"LeRobot v3.0 dataset at {root}: LeRobotDataset('twinloop/push-t', root='{root}')")
