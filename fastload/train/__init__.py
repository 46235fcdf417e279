"""``fastload finetune``: the reference ViT fine-tuning loop that measures the loader's gain.

config (the typed settings), finetune (one run), loop (an epoch, the optimizer step,
evaluation), finetune_data, amp (mixed precision, the NaN guard), model, optim, metrics,
checkpoint (owns the file layout), compare (A/B table), export, quantize. Imports
``fastload.loader`` and ``fastload.data`` (and ``fastload.pipelines.seams.torch_private`` for the
private torch names it uses).
"""
