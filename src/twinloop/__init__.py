"""twinloop: rehearse each action in a digital twin before acting, and keep the twin honest."""

from twinloop.errors import TwinloopError

__version__ = "0.1.0"
__all__ = ["TwinloopError", "__version__"]
