"""``python -m fastload ...``: the ``fastload`` command (fastload.tools.cli), for a shell where
the console script is not on PATH (a venv not activated, ``pip install --user``)."""

import sys

from fastload.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
