"""An output is stored by the first kernel that reads it only where that kernel walks it row by row."""

import torch
import torch.nn.functional as F

import lamina


def test_a_returned_value_that_its_reader_walks_across_is_stored_by_a_kernel_of_its_own():
    """Attention's values, also returned as a key-value cache: on Hopper the second product reads
    them through a K-major copy, which walks them along the positions. Stored by that copy, the
    values would be written an element per row; a kernel of their own stores them row by row."""
    def attention_and_values(q, k, v):
        values = v * 2
        return F.scaled_dot_product_attention(q, k, values, is_causal=True), values

    q, k, v = (torch.randn(1, 2, 136, 72, dtype=torch.bfloat16) for _ in range(3))
    compiled = lamina.compile(attention_and_values, (q, k, v), target="sm_90")
    writers = {k.name: [b.name for b in k.outputs] for k in compiled.compilation.loop.kernels}
    assert writers["mul"] == ["mul"] and writers["mul_k_major"] == ["mul_k_major"]
    out, values = compiled(q, k, v)
    assert torch.equal(values, v * 2)


def test_a_reader_that_walks_the_value_along_its_rows_stores_it():
    """The residual stream: the norm reads ``h`` row by row and stores it as it goes."""
    def add_and_norm(x, attn, g):
        h = x + attn
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g, h

    args = (torch.randn(5, 40), torch.randn(5, 40), torch.randn(40))
    compiled = lamina.compile(add_and_norm, args)
    assert len(compiled.compilation.loop.kernels) == 1
    normed, h = compiled(*args)
    torch.testing.assert_close(h, args[0] + args[1])
    torch.testing.assert_close(normed, add_and_norm(*args)[0])
