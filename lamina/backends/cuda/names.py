"""How Kernel IR names become C++ identifiers.

Kernel IR names are C identifiers, but a buffer may be called ``exp`` or ``float``
as easily as ``x``. Such a name would collide with a keyword or with a function the
generated code calls, so it gets a trailing underscore; every other name prints as it
is. A kernel's own name, a function at file scope, must also stay clear of the math
functions NVRTC declares there (a kernel named after its op, ``remainder``).
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
    "abs", "llabs", "max", "min", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "erf",
    "pow", "fabs", "fmax", "fmin", "expf", "exp2f", "logf", "sqrtf", "rsqrtf", "tanhf", "sinf", "cosf",
    "erff", "powf", "fabsf", "fmaxf", "fminf", "printf", "malloc", "free", "assert",
    "floor", "ceil", "trunc", "rint", "fmod", "floorf", "ceilf", "truncf", "rintf", "fmodf", "__fdiv_rn",
}

RESERVED = frozenset(_CPP_KEYWORDS | _CUDA_NAMES)

_MATH_API = (
    "acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh cospi erf erfc erfcinv erfcx erfinv exp "
    "exp10 exp2 expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb j0 j1 jn ldexp lgamma llrint llround "
    "log log10 log1p log2 logb lrint lround modf nan nearbyint nextafter norm pow rcbrt remainder remquo rhypot "
    "rint round rsqrt scalbln scalbn sin sincos sincospi sinh sinpi sqrt tan tanh tgamma trunc y0 y1 yn"
).split()
_FILE_SCOPE_FUNCTIONS = frozenset(_MATH_API + [f"{name}f" for name in _MATH_API])
"""The math functions of CUDA's math API, which NVRTC declares at file scope: no kernel may take their names."""

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


def kernel_c_name(name: str) -> str:
    """A kernel's name as its ``__global__`` function's, clear of NVRTC's math functions too."""
    return name + "_" if name in _FILE_SCOPE_FUNCTIONS - RESERVED else c_name(name, name)
