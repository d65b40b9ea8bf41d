"""How Kernel IR names become C++ identifiers.

Kernel IR names are C identifiers, but a buffer may be called ``exp`` or ``float``
as easily as ``x``. Such a name would collide with a keyword or with a function the
generated code calls, so it gets a trailing underscore; every other name prints
as it is.
"""

from __future__ import annotations

import re

from lamina.core.errors import VerificationError

_CPP_KEYWORDS = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char16_t", "char32_t", "class", "compl", "const", "constexpr",
    "const_cast", "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
    "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
    "reinterpret_cast", "return", "short", "signed", "sizeof", "static", "static_assert",
    "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try",
    "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
    "wchar_t", "while", "xor", "xor_eq",
}

_CUDA_NAMES = {
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "INFINITY", "NAN",
    "abs", "llabs", "max", "min", "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "erf",
    "pow", "fabs", "fmax", "fmin", "expf", "logf", "sqrtf", "rsqrtf", "tanhf", "sinf", "cosf",
    "erff", "powf", "fabsf", "fmaxf", "fminf", "printf", "malloc", "free", "assert",
}

RESERVED = frozenset(_CPP_KEYWORDS | _CUDA_NAMES)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def c_name(name: str, kernel: str) -> str:
    """``name`` as a C++ identifier that collides with nothing the generated code uses."""
    if not _IDENTIFIER.match(name):
        raise VerificationError(
            f"Kernel IR kernel {kernel} uses the name {name!r}, which is not a C identifier; "
            "the schedule that lowered it must name buffers, arrays and variables with letters, "
            "digits and underscores"
        )
    if name in RESERVED or name.startswith("lamina_"):
        return name + "_"
    return name
