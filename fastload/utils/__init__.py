"""Small helpers every fastload sub-package may use (argument checks, the fresh-process runner).

Imports nothing from the rest of fastload, so any layer can import it.
"""
