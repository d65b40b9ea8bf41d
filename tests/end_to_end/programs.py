"""Programs that the end-to-end tests compile, with the shapes of their inputs."""

import attrs
import torch


@attrs.frozen
class Case:
    id: str
    fn: object
    shapes: tuple

    def inputs(self, device="cpu", dtype=torch.float32):
        return tuple(torch.randn(s, dtype=dtype, device=device) for s in self.shapes)


def running_example(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


CASES = [
    Case("running_example", running_example, ((16, 64), (64,), (64, 16))),
    Case("ragged_matmul", running_example, ((17, 65), (65,), (65, 19))),
    Case("plain_mm", lambda a, b: a @ b, ((33, 40), (40, 7))),
    Case("batched_matmul", lambda a, b: torch.bmm(a, b), ((3, 17, 20), (3, 20, 9))),
    Case("broadcast_batched", lambda a, b: torch.matmul(a, b), ((2, 5, 12, 8), (8, 11))),
    Case("transpose_broadcast", lambda a, b: a.transpose(0, 1) * b, ((7, 5), (7,))),
    Case("linear_transposed_weight", lambda x, w, b: torch.nn.functional.linear(x, w, b), ((9, 24), (13, 24), (13,))),
    Case("sum_keepdim", lambda x: x.sum(dim=1, keepdim=True) - x, ((6, 37),)),
    Case("mean_and_max", lambda x: x.mean(dim=-1) + x.amax(dim=-1), ((5, 3, 29),)),
    Case("elementwise_chain", lambda x, y: torch.exp(-(x - y) * (x - y)) / (1.0 + torch.rsqrt(y * y + 1.0)), ((4, 33), (33,))),
    Case("view_permute", lambda x: x.reshape(6, 4, 5).permute(2, 0, 1).reshape(5, 24) * 2.0, ((24, 5),)),
]
