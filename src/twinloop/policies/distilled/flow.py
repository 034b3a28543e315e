"""The flow-matching velocity network ``v(x, s, c)``, its rectified-flow loss, Euler sampling and
training (AdamW, an exponential moving average of the weights, early stopping on held-out loss)."""

from __future__ import annotations

import copy
import math

import numpy as np

from twinloop.policies.distilled.config import PolicyConfig, TrainLog
from twinloop.policies.distilled.targets import train_steps

# -- the velocity network ------------------------------------------------------------------------


def _velocity_net(torch, n_ctx: int, n_y: int, cfg: PolicyConfig):
    """``v(x (B, D), s (B,), c (B, C)) -> (B, D)``: a residual MLP, FiLM-modulated by the
    context and the flow time."""
    nn = torch.nn
    w = cfg.width

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(w, elementwise_affine=False)
            self.film = nn.Linear(w, 2 * w)
            self.mlp = nn.Sequential(nn.Linear(w, 2 * w), nn.SiLU(), nn.Linear(2 * w, w))

        def forward(self, h, c):
            scale, shift = self.film(c).chunk(2, dim=-1)
            return h + self.mlp(self.norm(h) * (1 + scale) + shift)

    class Velocity(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("freqs", torch.exp(torch.linspace(0.0, math.log(1000.0), w // 2)))
            self.time = nn.Sequential(nn.Linear(2 * (w // 2), w), nn.SiLU(), nn.Linear(w, w))
            self.ctx = nn.Sequential(nn.Linear(n_ctx, w), nn.SiLU(), nn.Linear(w, w))
            self.inp = nn.Linear(n_y, w)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.depth))
            self.out = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, n_y))
            nn.init.zeros_(self.out[1].weight)  # start as the zero field: x0 flows nowhere
            nn.init.zeros_(self.out[1].bias)

        def forward(self, x, s, ctx):
            arg = s[:, None] * self.freqs[None, :]
            c = nn.functional.silu(self.time(torch.cat([arg.sin(), arg.cos()], dim=-1)) + self.ctx(ctx))
            h = self.inp(x)
            for b in self.blocks:
                h = b(h, c)
            return self.out(h)

    return Velocity()


# -- training and sampling ------------------------------------------------------------------------


def _flow_loss(torch, net, ctx, y, gen):
    """Rectified-flow loss of a batch: ``|v(x_s, s, c) - (y - x0)|^2``."""
    x0 = torch.randn(y.shape, generator=gen)
    s = torch.rand(len(y), generator=gen)
    xs = (1 - s[:, None]) * x0 + s[:, None] * y
    return torch.nn.functional.mse_loss(net(xs, s, ctx), y - x0)


def _mean_flow_loss(torch, net, ctx, y, n_noise: int, seed: int) -> float:
    """:func:`_flow_loss` averaged over ``n_noise`` draws of noise and flow time from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        return float(np.mean([_flow_loss(torch, net, ctx, y, gen).item() for _ in range(n_noise)]))


def _integrate(torch, net, x, ctx, n_steps: int):
    """Euler integration of ``dx/ds = v(x, s, c)`` from ``s = 0`` to 1."""
    ds = 1.0 / n_steps
    for i in range(n_steps):
        s = torch.full((len(x),), i * ds)
        x = x + ds * net(x, s, ctx)
    return x


def _train(torch, xn, yn, val, cfg: PolicyConfig, log: TrainLog, progress):
    """AdamW on the flow-matching loss; returns the EMA of the weights (in eval mode): the
    last, or with held-out data ``val = (x, y)`` the one of the lowest held-out loss."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = _velocity_net(torch, xn.shape[1], yn.shape[1], cfg)
    ema = _velocity_net(torch, xn.shape[1], yn.shape[1], cfg)
    ema.load_state_dict(net.state_dict())
    steps = log.steps = train_steps(cfg, len(xn))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = min(200, steps // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup) * (
        0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(k, steps) / steps))))
    best, best_state, stale = math.inf, None, 0
    net.train()
    perm, pos, total, count = torch.randperm(len(xn), generator=gen), 0, 0.0, 0
    for step in range(1, steps + 1):
        if pos + cfg.batch_size > len(xn) and pos > 0:
            perm, pos = torch.randperm(len(xn), generator=gen), 0
        idx = perm[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        loss = _flow_loss(torch, net, xn[idx], yn[idx], gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), net.parameters()):
                pe.lerp_(p, 1 - cfg.ema)
        total, count = total + loss.item(), count + 1
        if step % 50 == 0 or step == steps:
            log.losses.append(total / count)
            total, count = 0.0, 0
            if progress is not None:
                progress(step, steps, log.losses[-1])
        if val is not None and (step % cfg.val_every == 0 or step == steps):
            v = _mean_flow_loss(torch, ema, *val, n_noise=4, seed=0)  # the same draws every time
            log.val_steps.append(step)
            log.val_losses.append(v)
            if v < best:
                best, best_state, stale, log.best_step = v, copy.deepcopy(ema.state_dict()), 0, step
            else:
                stale += 1
                if cfg.patience is not None and stale >= cfg.patience:
                    break
    log.steps = step
    if best_state is not None:
        ema.load_state_dict(best_state)
    else:
        log.best_step = step
    ema.eval()
    return ema
