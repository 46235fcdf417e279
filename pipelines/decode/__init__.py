"""Decoding a batch: the DALI graph, what goes in and out of it, region and DCT-scaled
JPEG decodes, CPU resampling and reused output memory. Never reads the registry.
"""
