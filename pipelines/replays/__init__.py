"""Replays of torchvision's and timm's random transforms: their draws made from an
explicit generator, per sample, so a resumed run makes the same draws.
"""
