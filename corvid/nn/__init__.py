"""corvid.nn: modules, layers, initializers and losses, with PyTorch's names, defaults and
state-dict keys. ``nn.functional`` (also ``nn.F``) has the functional forms and the losses.

>>> from corvid import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> loss = ((model(cv.ones(3, 4)) - 1) ** 2).mean()
>>> loss.backward()
>>> model[0].weight.grad.shape
(8, 4)
"""

from . import functional, init, lora, losses
from . import functional as F
from .activation import (CELU, ELU, GELU, SELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax,
                         Mish, PReLU, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh)
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .decoder import CausalSelfAttention, GatedMLP, GemmaRMSNorm
from .dropout import Dropout
from .embedding import Embedding
from .linear import Flatten, Identity, Linear, Unflatten
from .lora import LoRALinear
from .loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, CTCLoss, HuberLoss, KLDivLoss,
                   L1Loss, MarginRankingLoss, MSELoss, NLLLoss, SmoothL1Loss, TripletMarginLoss)
from .losses import *  # the loss functions, as in nn.functional
from .module import IncompatibleKeys, Module
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
                   LayerNorm, RMSNorm)
from .parameter import Parameter
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                      AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d,
                      MaxUnpool2d, MaxUnpool3d, Upsample)
from .pytree import functional_call
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .rotary import RotaryEmbedding

__all__ = [
    "CELU", "ELU", "GELU", "GRU", "LSTM", "RNN", "SELU", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AvgPool1d", "AvgPool2d",
    "AvgPool3d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "CTCLoss",
    "CausalSelfAttention", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss", "Dropout", "Embedding", "F", "Flatten", "GRUCell", "GatedMLP", "GemmaRMSNorm", "GroupNorm",
    "Hardsigmoid", "Hardswish",
    "Hardtanh", "HuberLoss", "Identity", "IncompatibleKeys", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "KLDivLoss", "L1Loss", "LSTMCell", "LayerNorm", "LeakyReLU", "Linear", "LoRALinear", "LogSigmoid", "LogSoftmax",
    "MSELoss",
    "MarginRankingLoss", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Mish",
    "Module", "ModuleDict", "ModuleList",
    "MultiheadAttention", "NLLLoss", "PReLU", "Parameter", "RMSNorm", "RNNCell", "ReLU", "ReLU6", "RotaryEmbedding",
    "Sequential",
    "SiLU", "Sigmoid", "SmoothL1Loss", "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "TripletMarginLoss",
    "Unflatten", "Upsample", "functional", "functional_call", "init", "lora", "losses"]
__all__ += losses.__all__
