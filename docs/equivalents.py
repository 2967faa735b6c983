"""The names PyTorch has for each corvid module's public names (same name, same place), recorded
from torch 2.13.0 so that the docs build needs no torch. ``tests/test_docs.py`` compares them with
the installed torch, where there is one; ``python -m docs.equivalents`` prints what it finds.
"""

TORCH: dict[str, frozenset[str]] = {
    "corvid": frozenset("""
        Tensor abs acos acosh adaptive_avg_pool1d adaptive_max_pool1d add all any arange argmax argmin
        argsort asarray asin asinh atan atan2 atanh autocast avg_pool1d bfloat16 bitwise_and
        get_float32_matmul_precision set_float32_matmul_precision set_flush_denormal
        bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor bool broadcast_shapes broadcast_to
        can_cast cat ceil clip complex complex128 complex64 concat conj conv1d conv2d conv3d
        conv_transpose1d conv_transpose2d conv_transpose3d copysign cos cosh count_nonzero cummax cummin
        cumprod cumsum diag diagonal diff digamma divide e einsum empty empty_like enable_grad equal erf
        erfc erfinv exp expm1 eye finfo flip float16 float32 float64 float8_e4m3fn float8_e5m2 floor
        floor_divide frac from_dlpack full full_like gather get_default_device greater greater_equal hypot
        i0 iinfo imag index_select inf int16 int32 int64 int8 is_grad_enabled isfinite isin isinf isnan jit
        less less_equal lgamma linspace load log log10 log1p log2 logaddexp logcumsumexp logical_and
        logical_not logical_or logical_xor manual_seed matmul max max_pool1d max_pool2d max_pool3d maximum
        mean meshgrid min minimum moveaxis multiply nan nan_to_num negative newaxis nextafter no_grad
        nonzero not_equal ones ones_like pi positive pow prod promote_types rand randint randn real
        reciprocal remainder reshape result_type roll rot90 round save scatter scatter_reduce searchsorted
        set_default_device sign signbit sin sinh sort sqrt square squeeze stack std subtract sum swapaxes
        take tan tanh tensordot tile topk trace tril triu trunc uint16 uint32 uint64 uint8 var vmap where
        zeros zeros_like
    """.split()),
    "corvid.linalg": frozenset("""
        LinAlgError cholesky cond cross det diagonal eig eigh eigvals eigvalsh inv lstsq matmul matrix_norm
        matrix_power matrix_rank norm pinv qr slogdet solve svd svdvals vecdot vector_norm
    """.split()),
    "corvid.fft": frozenset("""
        fft fft2 fftfreq fftn fftshift hfft ifft ifft2 ifftn ifftshift ihfft irfft irfftn rfft rfftfreq
        rfftn
    """.split()),
    "corvid.nn": frozenset("""
        AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d
        AdaptiveMaxPool3d AvgPool1d AvgPool2d AvgPool3d BCELoss BCEWithLogitsLoss BatchNorm1d BatchNorm2d
        BatchNorm3d CELU CTCLoss Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d
        CosineEmbeddingLoss CrossEntropyLoss Dropout ELU Embedding Flatten GELU GRU GRUCell GroupNorm
        Hardsigmoid Hardswish Hardtanh HuberLoss Identity InstanceNorm1d InstanceNorm2d InstanceNorm3d
        KLDivLoss L1Loss LSTM LSTMCell LayerNorm LeakyReLU Linear LogSigmoid LogSoftmax MSELoss
        MarginRankingLoss MaxPool1d MaxPool2d MaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d Mish Module
        ModuleDict ModuleList MultiheadAttention NLLLoss PReLU Parameter RMSNorm RNN RNNCell ReLU ReLU6 SELU
        Sequential SiLU Sigmoid SmoothL1Loss Softmax Softmin Softplus Softsign Tanh TripletMarginLoss
        Unflatten Upsample
    """.split()),
    "corvid.nn.functional": frozenset("""
        adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
        adaptive_max_pool3d avg_pool1d avg_pool2d avg_pool3d batch_norm binary_cross_entropy
        binary_cross_entropy_with_logits celu conv1d conv2d conv3d conv_transpose1d conv_transpose2d
        conv_transpose3d cosine_embedding_loss cross_entropy ctc_loss dropout elu embedding gelu group_norm
        hardsigmoid hardswish hardtanh huber_loss instance_norm interpolate kl_div l1_loss layer_norm
        leaky_relu linear log_softmax logsigmoid margin_ranking_loss max_pool1d max_pool2d max_pool3d
        max_unpool1d max_unpool2d max_unpool3d mish mse_loss nll_loss normalize one_hot pad prelu relu relu6
        rms_norm scaled_dot_product_attention selu sigmoid silu smooth_l1_loss softmax softmin softplus
        softsign tanh triplet_margin_loss
    """.split()),
    "corvid.nn.init": frozenset("""
        calculate_gain constant_ kaiming_normal_ kaiming_uniform_ normal_ ones_ orthogonal_ trunc_normal_
        uniform_ xavier_normal_ xavier_uniform_ zeros_
    """.split()),
    "corvid.optim": frozenset("""
        Adagrad Adam AdamW Optimizer RMSprop SGD
    """.split()),
    "corvid.optim.lr_scheduler": frozenset("""
        CosineAnnealingLR ExponentialLR LRScheduler LambdaLR LinearLR MultiStepLR OneCycleLR
        ReduceLROnPlateau SequentialLR StepLR
    """.split()),
    "corvid.data": frozenset("""
        DataLoader Dataset Subset TensorDataset default_collate
    """.split()),
    "corvid.amp": frozenset("""
        GradScaler autocast
    """.split()),
    "corvid.Tensor": frozenset("""
        H T abs abs_ absolute acos acosh add add_ addcdiv addcdiv_ addcmul addcmul_ addmm adjoint all
        allclose amax amin aminmax angle any argmax argmin argsort argwhere asin asinh atan atan2 atanh
        backward bfloat16 bitwise_and bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift
        bitwise_xor bmm bool broadcast_to byte cdouble ceil ceil_ cfloat char chunk clamp clamp_ clamp_max
        clamp_max_ clamp_min clamp_min_ clip clip_ clone conj contiguous copy_ copysign copysign_ cos cos_
        cosh count_nonzero cpu cross cummax cummin cumprod cumsum deg2rad detach device diag diagonal diff
        dim div div_ divide dot double dtype element_size eq equal erf exp exp2 exp_ expand expand_as expm1
        fill_ flatten flip fliplr flipud float floor floor_ floor_divide fmax fmin fmod fmod_ frac gather ge
        grad gt half hypot imag index_add index_add_ index_copy index_copy_ index_fill index_fill_
        index_select int is_complex is_contiguous is_floating_point is_leaf isclose isfinite isinf isnan
        isneginf isposinf item itemsize kron le lerp lerp_ log log10 log1p log2 log_ log_softmax logaddexp
        logcumsumexp logical_and logical_not logical_or logical_xor logsumexp long lt mH mT masked_fill
        masked_fill_ masked_select matmul max maximum mean min minimum mm moveaxis movedim mul mul_ multiply
        mv nan_to_num nan_to_num_ nanmean nansum narrow nbytes ndim ndimension ne neg neg_ negative nelement
        new_empty new_full new_ones new_tensor new_zeros nonzero numel numpy outer permute positive pow pow_
        prod rad2deg real reciprocal reciprocal_ relu relu_ remainder remainder_ repeat repeat_interleave
        requires_grad requires_grad_ reshape reshape_as roll rot90 round round_ rsqrt rsqrt_ scatter
        scatter_ scatter_add scatter_add_ scatter_reduce scatter_reduce_ select sgn shape short sigmoid
        sigmoid_ sign signbit sin sin_ sinh size softmax sort split sqrt sqrt_ square squeeze std stride sub
        sub_ subtract sum swapaxes swapdims t take take_along_dim tan tanh tanh_ tensor_split tile to tolist
        topk trace transpose tril tril_ triu triu_ true_divide trunc trunc_ type_as unbind unflatten unfold
        unique unsqueeze var view view_as where xlogy zero_
    """.split()),
}


WHERE = {"corvid": "torch", "corvid.linalg": "torch.linalg", "corvid.fft": "torch.fft", "corvid.nn": "torch.nn",
         "corvid.nn.functional": "torch.nn.functional", "corvid.nn.init": "torch.nn.init",
         "corvid.optim": "torch.optim", "corvid.optim.lr_scheduler": "torch.optim.lr_scheduler",
         "corvid.data": "torch.utils.data", "corvid.amp": "torch.amp", "corvid.Tensor": "torch.Tensor"}


def found() -> dict[str, frozenset[str]]:
    """What the installed torch has, as :data:`TORCH` records it."""
    import importlib

    import torch

    from .reference import public_names

    out = {}
    for module, place in WHERE.items():
        target = torch.Tensor if module == "corvid.Tensor" else importlib.import_module(place)
        out[module] = frozenset(n for n in public_names(module) if hasattr(target, n))
    return out


if __name__ == "__main__":
    for module, names in found().items():
        print(module, " ".join(sorted(names)))
