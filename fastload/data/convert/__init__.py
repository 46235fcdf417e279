"""``fastload convert``: image sources in, a fastload LMDB or sharded set out; resumable,
one conversion per destination, every unreadable file reported.
"""
