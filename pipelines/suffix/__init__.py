"""The torch suffix: what runs after the DALI prefix, per sample, on decoded tensors;
its deterministic tail as a lookup table; the MixUp/CutMix collate.
"""
