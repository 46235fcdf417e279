"""The ``fastload`` command line. Installed as ``fastload.tools``."""
