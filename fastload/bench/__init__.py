"""``fastload bench``: loaders measured side by side on the same files.

rows (one runner per loader: torch's tuned DataLoader, fastload from the folder or an LMDB,
the decode ceiling, a hand-written DALI graph, FFCV), process (each row in its own process,
peak memory), harness (interleaved rounds, the recipe table), report (table, JSON, chart),
recipes (the transforms people train with), ceiling, reference_graph, demo_report.
Imports fastload.loader and fastload.data; nothing imports it but ``fastload.tools``.
"""
