"""DALI graph definitions and the torchvision -> DALI transform translation.

Installed as ``fastload.pipelines``. Imports neither ``fastload`` nor ``fastload.tools``.
"""
