"""Frontends: capture a program written in another framework as Torch IR."""
