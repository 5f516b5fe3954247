"""Exceptions an implementation may raise to tell the harness what happened."""


class Unsupported(Exception):
    """Raised by ``prepare`` (or ``compile_only``) when this case or machine cannot be run; the
    row is shown as SKIP with the message as its reason, never dropped."""
