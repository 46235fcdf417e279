"""The DALI prefix: the plan a transform becomes, each transform's step, and the
per-sample geometry computed with torchvision's own arithmetic.
"""
