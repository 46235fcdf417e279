"""``fastload.DataLoader``: torch's DataLoader contract, batches made by a DALI graph.

dataloader (the drop-in class, the fallback), epoch (one epoch's iterator; maker: its maker
thread), plan (what runs where), datasets (which datasets it reads, what a dataset= path
names), sources (each kind's reads and labels; image_headers: sizes from headers, Pillow's
pixel limit), sampling (the one seed rule, epoch order, sharding), shard_order (the
shard-aware order of sharded sets), state_fields (the checks of a loaded state_dict),
presets (ImageNet transforms), stall (data-wait meter), damage (the damaged-JPEG check).
Imports ``fastload.data`` and ``fastload.pipelines`` (the graphs and the torch suffix).
"""
