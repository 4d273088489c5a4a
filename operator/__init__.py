"""Kopf controllers of cardquota, shipped as ``cardquota.operator``.

This folder sits at the top of the repository but is never a top-level ``operator`` package (that name belongs
to the standard library): ``pyproject.toml`` maps it to ``cardquota.operator``.
"""
