"""Functional forms of the layers, as ``torch.nn.functional`` (``import corvid.nn.functional as F``).

Everything here is a plain function of tensors: the modules of :mod:`corvid.nn` call these
with their parameters. Convolution and pooling are corvid's own (:func:`corvid.conv2d`,
:func:`corvid.max_pool2d`…), re-exported under torch's names; the loss functions come from
:mod:`corvid.nn.losses`.

>>> import corvid.nn.functional as F
>>> x = cv.ones(2, 3)
>>> F.softmax(F.linear(x, cv.ones(4, 3)), dim=-1).shape
(2, 4)
"""

from ..ops.conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d,
                        adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, conv1d, conv2d,
                        conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d)
from . import losses
from .activation import (celu, elu, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, log_softmax, logsigmoid, mish,
                         prelu, relu, relu6, selu, sigmoid, silu, softmax, softmin, softplus, softsign, tanh)
from .attention import scaled_dot_product_attention
from .dropout import dropout
from .embedding import embedding, one_hot
from .linear import linear
from .losses import *  # that module defines __all__
from .norm import batch_norm, group_norm, instance_norm, layer_norm, normalize, rms_norm
from .padding import pad
from .pooling import (interpolate, max_pool1d, max_pool2d, max_pool3d, max_unpool1d, max_unpool2d,
                      max_unpool3d)
from .rotary import apply_rotary_emb

__all__ = [
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "adaptive_max_pool3d", "apply_rotary_emb", "avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "celu",
    "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "dropout", "elu", "embedding", "gelu", "group_norm",
    "hardsigmoid", "hardswish", "hardtanh", "instance_norm", "interpolate", "layer_norm", "leaky_relu", "linear",
    "log_softmax", "logsigmoid", "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool1d", "max_unpool2d",
    "max_unpool3d", "mish", "normalize", "one_hot", "pad",
    "prelu", "relu", "relu6", "rms_norm", "scaled_dot_product_attention", "selu", "sigmoid", "silu", "softmax",
    "softmin", "softplus", "softsign", "tanh"]
__all__ += losses.__all__
