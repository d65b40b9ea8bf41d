"""Cases for the ops that CNNs need (padding, convolution, batch norm, pooling), captured with
``torch.export`` as a model would be: images of 13 pixels a side, odd channel counts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.plugins.ops.lowering import Case


def convolutions(x, w, bias, grouped, depthwise, line, line_w):
    return (F.conv2d(x, w, bias, padding=1), F.conv2d(x, w, stride=2, dilation=2, padding=2),
            F.conv2d(x, grouped, groups=3, padding=(1, 0)), F.conv2d(x, depthwise, groups=3, stride=(2, 1)),
            F.conv1d(line, line_w, padding=1))


def batch_norms(x, mean, var, weight, bias, half):
    return (F.batch_norm(x, mean, var, weight, bias, eps=1e-3), F.batch_norm(x.transpose(-1, -2), mean, var),
            F.batch_norm(half, mean.half(), var.half(), weight.half(), bias.half()))


def poolings(x, line):
    values, indices = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    return (values, indices, F.max_pool2d(x, 2, ceil_mode=True), F.max_pool2d(x, (3, 2), dilation=(1, 2)),
            F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(x, 2, divisor_override=3), F.adaptive_avg_pool2d(x, (3, 3)),
            F.adaptive_avg_pool2d(x, (5, 4)), F.adaptive_avg_pool2d(x, 1), F.max_pool1d(line, 3, 2),
            F.avg_pool1d(line, 2), F.adaptive_avg_pool1d(line, 4))


def paddings(x, i):
    return F.pad(x, (1, 2, 3, 0)), F.pad(x, (-1, 2, 0, -3), value=1.5), F.pad(i, (2, 2), value=-7)


IMAGE_OP_CASES = [
    Case("convolutions", convolutions, lambda: (
        torch.randn(2, 3, 13, 13), torch.randn(5, 3, 3, 3), torch.randn(5), torch.randn(6, 1, 3, 2),
        torch.randn(3, 1, 3, 3), torch.randn(2, 4, 17), torch.randn(7, 4, 3))),
    Case("batch_norms", batch_norms, lambda: (
        torch.randn(2, 5, 13, 13), torch.randn(5), torch.rand(5) + 0.5, torch.randn(5), torch.randn(5),
        torch.randn(2, 5, 13, 13, dtype=torch.float16))),
    Case("poolings", poolings, lambda: (torch.randn(2, 3, 13, 13), torch.randn(2, 3, 17))),
    Case("paddings", paddings, lambda: (torch.randn(2, 3, 13, 13), torch.randint(-5, 6, (4, 5)))),
]
