"""The case database: sample inputs and PyTorch references for ATen ops."""

from lamina.testing.cases.database import OpCases, aten_op, cases_for, register_cases, registered_ops
from lamina.testing.cases.samples import Case, T, unary_cases

__all__ = ["Case", "OpCases", "T", "aten_op", "cases_for", "register_cases", "registered_ops", "unary_cases"]
