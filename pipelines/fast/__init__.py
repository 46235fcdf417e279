"""Exact fast paths: torchvision's colour ops, auto-augment ops and Pillow's affine on uint8
tensors, bit for bit, backed by the C kernels under ``csrc/``.
"""
