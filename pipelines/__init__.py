"""DALI graph definitions, the torchvision/timm -> DALI translation and the torch suffix.

registry (one entry per supported transform class: ops.Op) is read by translate (the DALI
prefix: prefix, prefix_steps, geometry, draws), split (prefix + suffix), suffix (per-sample
torch ops: augment and its replays augment_v1/v2/timm, tail, fast_ops). graph/batch_decoder
run the prefix (graph_io: a batch's arrays in, its tensor out; dali_backend: the seam with
DALI's private handle); torch_seams holds every private torch/torchvision/timm name.
Installed as ``fastload.pipelines``; imports nothing of ``fastload`` or ``fastload.tools``.
"""
