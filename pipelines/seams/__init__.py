"""The seams: the only places fastload touches private names of torch, torchvision,
timm and DALI.
"""
