"""The sources ``fastload convert`` reads, one module per kind, behind one interface.

* ``base``: :class:`SourceList` (root, kind, classes, records, fingerprint) and
  :func:`iter_records`, what the converter consumes;
* ``labels``: the one rule from a source's labels to class indices and names;
* ``filelist`` and ``jsonl``: lists of image files (CSV and JSONL) with labels;
* ``webdataset``: WebDataset tar shards (``tarfile``);
* ``parquet``: parquet files (``pyarrow``); ``hf_datasets``: ``save_to_disk`` folders
  (``datasets``); ``arrow``: the image and label columns both share.

:func:`fastload.data.convert.source_list.list_source` picks the kind from ``SRC``.
"""
