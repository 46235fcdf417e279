"""The ``fastload`` command line: one module per subcommand that parses flags, calls the
library and prints (cli.py dispatches and owns the exit codes). Installed as ``fastload.tools``.
"""
