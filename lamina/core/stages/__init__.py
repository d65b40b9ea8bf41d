"""The stages that carry a program from one IR level to the next."""
