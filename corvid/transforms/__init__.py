"""Function transforms: graph-to-graph rewrites over VAR-marked inputs (see corvid/graph/node.py)."""

from .batching import vmap
from .forward import custom_jvp, hessian, jacfwd, jvp
from .reverse import grad, jacrev, value_and_grad, vjp
from .custom import checkpoint, custom_vjp
