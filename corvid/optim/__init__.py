"""corvid.optim: optimizers, learning-rate schedules and gradient clipping.

PyTorch style (every new value of a step is computed in one schedule of fused kernels)::

    opt = cv.optim.AdamW(model.parameters(), lr=1e-3)
    sched = cv.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    for x, y in loader:
        opt.zero_grad()
        loss = cv.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        cv.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()

The loop body can be jitted as it is (``step = cv.jit(train_step)`` around ``zero_grad``,
``backward`` and ``step``): the captured program reads the learning rate at each call, so the
scheduler keeps working without a retrace.

Functional style, on pytrees, for ``cv.jit``, ``cv.grad`` and ``cv.vmap`` (the same update rules)::

    tx = cv.optim.Adam.functional(lr=1e-3)
    state = tx.init(params)
    params, state = tx.update(grads, state, params)

Saving: ``cv.save("opt.safetensors", cv.optim.flatten_state_dict(opt.state_dict()))`` and
``opt.load_state_dict(cv.load("opt.safetensors"))``.

>>> w = cv.Tensor([1.0], requires_grad=True)
>>> opt = cv.optim.Adam([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> round(w.item(), 4)
0.9
"""

from . import lr_scheduler
from .adam import LAMB, Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .lion import Lion
from .optimizer import Functional, Optimizer
from .rmsprop import Adagrad, RMSprop
from .sgd import SGD
from .state import flatten_state_dict, unflatten_state_dict

__all__ = ["LAMB", "SGD", "Adagrad", "Adam", "AdamW", "Functional", "Lion", "Optimizer", "RMSprop",
           "clip_grad_norm_", "clip_grad_value_", "flatten_state_dict", "lr_scheduler", "unflatten_state_dict"]
