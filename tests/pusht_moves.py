"""A push-t scene moved rigidly (tests of the policy frame)."""

import numpy as np


def moved(g, obs):
    """Observations ``(..., 10)`` of the scene turned by ``g[2]`` about the origin, then shifted by ``g[:2]``."""
    c, s = np.cos(g[2]), np.sin(g[2])
    R = np.array([[c, -s], [s, c]])
    o = np.array(obs, dtype=float)
    for cols in ((0, 1), (2, 3)):
        o[..., cols] = o[..., cols] @ R.T + g[:2]
    for cols in ((5, 6), (7, 8)):
        o[..., cols] = o[..., cols] @ R.T
    o[..., 4] += g[2]
    return o
