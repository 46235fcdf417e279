"""``fastload.DataLoader``: torch's DataLoader contract, batches made by a DALI graph.

dataloader (the drop-in class, the fallback), epoch (one epoch's iterator), plan (what runs
where), sources (a dataset's file list and labels), sampling (the one seed rule, epoch order,
sharding), shard_order (the shard-aware order of sharded sets), state_fields (the checks
of a loaded state_dict), presets (ImageNet transforms), stall (data-wait meter),
decoder_log. Imports ``fastload.data`` and ``fastload.pipelines`` (the graphs and the torch
suffix).
"""
